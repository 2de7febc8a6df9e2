// A --config TOML file read by StrictConfig, against an app with flags of every kind ulysses-train has.
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/strict_config.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  CLI::App app("fuzz");
  int steps = 0;
  double lr = 0;
  std::string name;
  bool flag = false;
  std::vector<int> list;
  app.add_option("--steps", steps);
  app.add_option("--lr", lr);
  app.add_option("--output", name);
  app.add_flag("--overwrite", flag);
  app.add_option("--lengths", list);
  app.set_config("--config");
  app.config_formatter(std::make_shared<ulysses::StrictConfig>(app));
  const auto path = ulysses::fuzz::write_file("train.toml", ulysses::fuzz::as_text(data, size));
  const std::string config = path.string();
  const char* argv[] = {"fuzz", "--config", config.c_str()};
  try {
    app.parse(3, argv);
  } catch (const CLI::ParseError&) {   // what parse_command_line (core/cli.hpp) turns into one line and exit 2
  } catch (const ulysses::BadInput&) {
  }
  return 0;
}

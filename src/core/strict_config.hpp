// A TOML --config reader that refuses what it would otherwise ignore: an unknown key or any [section] is a parse
// error naming the file, the line, the key and the nearest known key (with the name a Hugging Face Trainer or
// DeepSpeed user would write mapped to ours: learning_rate → lr). Keys are the flags without "--"; "-" and "_"
// are alike (save_every = 5 is --save-every 5, as checkpoints' trainer_state.json writes options). A value of the
// wrong TOML type is refused the same way, nothing coerced: an integer flag takes an integer (not 10.5, "10" or
// [5]), a number flag a number, a flag true or false; a quoted word (auto) is left to the flag's own check. A list
// flag takes an array or a string of its delimited items ("q_proj,v_proj", as --print-config writes its default).
//   app.config_formatter(std::make_shared<StrictConfig>(app));   // after every option is added
#pragma once

#include <istream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ulysses {

class StrictConfig : public CLI::ConfigTOML {
 public:
  explicit StrictConfig(const CLI::App& app) : app_(app) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  const CLI::App& app_;
};

// The known key nearest to `key` (edit distance), or a known synonym's key; "" when nothing is close.
std::string nearest_key(const std::string& key, const std::vector<std::string>& known);

}  // namespace ulysses

// Command-line parsing shared by every tool: --help prints and exits 0; a bad flag is one
// "error: … — HINT: run 'TOOL --help'" line on stderr and exit code 2, like every other bad input. A flag that no
// option has (a typo) is named first, whatever CLI11 would have said, with the nearest flag that exists:
// "error: --save-evry is not a flag of ulysses-train — HINT: did you mean --save-every? (run 'ulysses-train --help')".
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/number_checks.hpp"
#include "core/strict_config.hpp"

namespace ulysses {

inline constexpr std::int64_t kMostRanks = 1 << 20;   // ranks of an SP group, of an island, threads

// --sp-ring as ulysses-train, ulysses-pack and ulysses-plan take it: the ring degree R inside the SP group (the
// Ulysses degree is --sp / R), a whole number in [1, 2^20]; `role` says what it is to this tool.
inline CLI::Option* add_sp_ring_option(CLI::App& app, std::int64_t& ring, const std::string& role) {
  return app.add_option("--sp-ring", ring, "Ring degree R inside the SP group (Ulysses degree --sp / R): " + role)
      ->check(whole_number(1, kMostRanks))
      ->capture_default_str();
}

// The long option names (without --) of `app` and all its subcommands.
inline void long_names(CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* o : app.get_options())
    for (const auto& name : o->get_lnames()) out.push_back(name);
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>([](CLI::App*) { return true; })))
    long_names(*sub, out);
}

// The first "--flag" (or "--flag=value") of argv that no option of `app` has, or "" when every one is known.
inline std::string unknown_flag(CLI::App& app, int argc, char** argv, std::vector<std::string>& known) {
  long_names(app, known);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() <= 2 || !arg.starts_with("--")) continue;
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (std::find(known.begin(), known.end(), name) == known.end()) return name;
  }
  return "";
}

// std::nullopt: parsed, go on. Otherwise the exit code to return. `speak` false keeps a rank silent.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, bool speak = true) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {   // --help
    return speak ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    if (!speak) return kExitBadInput;
    std::vector<std::string> known;
    if (const std::string typo = unknown_flag(app, argc, argv, known); !typo.empty()) {
      std::string near = nearest_key(typo, known);   // a synonym may name a flag of another tool
      if (std::find(known.begin(), known.end(), near) == known.end()) near.clear();
      const std::string help = fmt::format("run '{} --help'", argv[0]);
      fmt::print(stderr, "error: --{} is not a flag of {} — HINT: {}\n", typo,
                 std::filesystem::path(argv[0]).filename().string(),
                 near.empty() ? help : fmt::format("did you mean --{}? ({})", near, help));
    } else {
      fmt::print(stderr, "error: {} — HINT: run '{} --help'\n", e.what(), argv[0]);
    }
    return kExitBadInput;
  }
  return std::nullopt;
}

}  // namespace ulysses

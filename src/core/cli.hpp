// Command-line parsing shared by every tool: --help prints and exits 0; a bad flag is one
// "error: … — HINT: run 'TOOL --help'" line on stderr and exit code 2, like every other bad input.
#pragma once

#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses {

// std::nullopt: parsed, go on. Otherwise the exit code to return. `speak` false keeps a rank silent.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, bool speak = true) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {   // --help
    return speak ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    if (speak) fmt::print(stderr, "error: {} — HINT: run '{} --help'\n", e.what(), argv[0]);
    return kExitBadInput;
  }
  return std::nullopt;
}

}  // namespace ulysses

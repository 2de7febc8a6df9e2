// Errors and checks shared by every tool.
//
// Contract: bad input from the user (a flag, a file, a number) is a BadInput: one line naming the
// file/flag and the numbers, plus a hint (lint_hints: every throw has one), and exit kExitBadInput (2).
// Broken invariants inside our own code are ULY_CHECK failures (std::logic_error with file:line) and
// exit with kExitFailure (1). Nothing here knows about MPI or LibTorch.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace ulysses {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // internal error, I/O failure, a peer rank failed
  kExitBadInput = 2,      // the user's input or flags are wrong; the message says which and why
  kExitPreempted = 3,     // a signal asked us to save and stop; the checkpoint is complete (resume it)
  kExitNonFinite = 4,     // training met a non-finite loss or gradient norm: stopped, nothing saved on it
};

class BadInput : public std::runtime_error {
 public:
  explicit BadInput(const std::string& what, std::string hint = "")
      : std::runtime_error(what), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

// Formats "what — HINT: hint" on one line, as every tool prints it: control characters that came from a file
// (a newline, an ANSI escape) are shown as \xNN, so the message stays one line and cannot rewrite the terminal.
std::string one_line(const BadInput& e);

// A string taken from a file, for a message: control characters as \xNN, cut to `max` bytes with "…".
std::string printable(std::string_view text, std::size_t max = 64);

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace ulysses

// An invariant of our own code. The message is formatted only on failure.
#define ULY_CHECK(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) ::ulysses::check_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

#include "core/main_guard.hpp"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses {

int run_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const BadInput& e) {
    fmt::print(stderr, "error: {}\n", one_line(e));
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", printable(e.what(), 4096));   // library text may quote a file's bytes
    return kExitFailure;
  }
}

}  // namespace ulysses

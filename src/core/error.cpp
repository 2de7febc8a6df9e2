#include "core/error.hpp"

namespace ulysses {

std::string one_line(const BadInput& e) {
  if (e.hint().empty()) return e.what();
  return fmt::format("{} — HINT: {}", e.what(), e.hint());
}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  throw std::logic_error(fmt::format("{}:{}: check '{}' failed: {}", file, line, cond, msg));
}

}  // namespace ulysses

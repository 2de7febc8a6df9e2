#include "core/error.hpp"

namespace ulysses {

namespace {

std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  return out;
}

}  // namespace

std::string one_line(const BadInput& e) {
  if (e.hint().empty()) return escape_controls(e.what());
  return escape_controls(fmt::format("{} — HINT: {}", e.what(), e.hint()));
}

std::string printable(std::string_view text, std::size_t max) {
  if (text.size() <= max) return escape_controls(text);
  while (max > 0 && (static_cast<unsigned char>(text[max]) & 0xC0) == 0x80) --max;   // not inside a UTF-8 character
  return escape_controls(text.substr(0, max)) + "…";
}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  throw std::logic_error(fmt::format("{}:{}: check '{}' failed: {}", file, line, cond, msg));
}

}  // namespace ulysses

#include "core/number_checks.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace ulysses {
namespace {

// What the range is, in words: "from 1 to 9", "> 0", "from 0 to 1 (1 excluded)".
std::string range_text(double min, double max, Bound low, Bound high) {
  const bool no_top = max == kUnbounded;
  if (no_top) return fmt::format("{} {}", low == Bound::kOpen ? ">" : "≥", min);
  std::string text = fmt::format("from {} to {}", min, max);
  if (low == Bound::kOpen && high == Bound::kOpen) return text + " (both excluded)";
  if (low == Bound::kOpen) return text + fmt::format(" ({} excluded)", min);
  if (high == Bound::kOpen) return text + fmt::format(" ({} excluded)", max);
  return text;
}

}  // namespace

CLI::Validator whole_number(std::int64_t min, std::int64_t max) {
  const std::string range = max == kMostCount ? fmt::format("≥ {}", min)
                                                                            : fmt::format("from {} to {}", min, max);
  return CLI::Validator(
      [=](const std::string& text) {
        std::int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data() + (text.starts_with('+') ? 1 : 0), end, value);
        if (ec == std::errc() && ptr == end && value >= min && value <= max) return std::string();
        return fmt::format("\"{}\" is not a whole number {}", text, range);
      },
      range);
}

CLI::Validator real_number(double min, double max, Bound low, Bound high) {
  const std::string range = range_text(min, max, low, high);
  return CLI::Validator(
      [=](const std::string& text) {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data() + (text.starts_with('+') ? 1 : 0), end, value);
        const bool above = low == Bound::kOpen ? value > min : value >= min;
        const bool below = high == Bound::kOpen ? value < max : value <= max;
        if (ec == std::errc() && ptr == end && std::isfinite(value) && above && below) return std::string();
        return fmt::format("\"{}\" is not a finite number {}", text, range);
      },
      range);
}

}  // namespace ulysses

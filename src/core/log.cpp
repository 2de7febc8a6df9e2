#include "core/log.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/error.hpp"

namespace ulysses {
namespace {
std::mutex g_mutex;
std::string g_tag = "ulysses";
}  // namespace

void set_log_tag(std::string_view tag) {
  std::lock_guard lock(g_mutex);
  g_tag = tag;
}

void log_line(std::string_view message) {
  std::lock_guard lock(g_mutex);
  fmt::print(stderr, "[{}] {}\n", g_tag, message);
  std::fflush(stderr);
}

std::string human_bytes(std::uint64_t b) {
  const double x = static_cast<double>(b);
  if (b >= (std::uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", x / (1 << 30));
  if (b >= (std::uint64_t{1} << 20)) return fmt::format("{:.2f} MiB", x / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", x / 1024);
  return fmt::format("{} B", b);
}

std::string human_count(std::uint64_t n) {
  static const std::pair<double, const char*> kUnits[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  const double x = static_cast<double>(n);
  for (const auto& [unit, name] : kUnits) {
    if (x < unit) continue;
    const double v = x / unit;
    return fmt::format("{:.{}f}{}", v, v >= 100 ? 0 : v >= 10 ? 1 : 2, name);
  }
  return fmt::format("{}", n);
}

int end_dry_run() {
  log_info("dry run: nothing was written");
  return 0;
}

std::uint64_t parse_size(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},       {"b", 1},          {"kb", 1e3},  {"mb", 1e6},  {"gb", 1e9},  {"tb", 1e12},
      {"kib", 1024}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double value = -1;
  try {
    std::size_t used = 0;
    if (i > 0) value = std::stod(text.substr(0, i), &used);
    if (used != i) value = -1;
  } catch (const std::exception&) {
    value = -1;
  }
  for (const auto& [name, scale] : kUnits)
    if (value > 0 && unit == name) return static_cast<std::uint64_t>(std::llround(value * scale));
  throw BadInput(fmt::format("{} \"{}\" is not a size", flag, text), "write e.g. 5GB, 500MB, 2GiB or a byte count");
}

}  // namespace ulysses

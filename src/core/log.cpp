#include "core/log.hpp"

#include <cstdio>
#include <mutex>
#include <string>

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

}  // namespace ulysses

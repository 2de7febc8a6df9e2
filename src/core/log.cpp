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

}  // namespace ulysses

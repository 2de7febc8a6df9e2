// Plain log lines on stderr: "[tool] message". Progress bars live in progress.hpp.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace ulysses {

void set_log_tag(std::string_view tag);       // e.g. "pack", "train r3"
void log_line(std::string_view message);      // one line, flushed

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ulysses

// Plain log lines on stderr: "[tool] message". Progress bars live in progress.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace ulysses {

void set_log_tag(std::string_view tag);       // e.g. "pack", "train r3"
void log_line(std::string_view message);      // one line, flushed

// The last line of every tool's --dry-run: "dry run: nothing was written"; returns exit code 0.
int end_dry_run();

std::string human_bytes(std::uint64_t bytes);   // "1.23 GiB", "4.0 KiB", "12 B": how logs write a size
std::string human_count(std::uint64_t n);       // three significant digits: "8.03B", "124M", "103K", "12"
// "5GB", "500MB", "2GiB", "1.5GB", "123456" → bytes (GB = 10^9, GiB = 2^30, as Hugging Face). BadInput naming
// `flag` otherwise.
std::uint64_t parse_size(const std::string& text, const std::string& flag);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ulysses

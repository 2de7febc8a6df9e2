// Progress reporting: a redrawn bar on a terminal (rate, ETA), one plain line every few seconds
// otherwise (logs, CI). Thread-safe: workers call add(); one reporter prints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace ulysses {

class Progress {
 public:
  // total: expected count of `unit` (0 = unknown); secondary counts (e.g. tokens) go to add()'s 2nd arg.
  Progress(std::string label, std::uint64_t total, std::string unit, std::string unit2 = "");
  ~Progress();
  void add(std::uint64_t n, std::uint64_t n2 = 0);
  void finish();   // prints the final line once

 private:
  void maybe_print(bool force);
  std::string line() const;

  std::string label_, unit_, unit2_;
  std::uint64_t total_;
  std::atomic<std::uint64_t> done_{0}, done2_{0};
  std::chrono::steady_clock::time_point start_, last_print_;
  std::mutex mutex_;
  bool tty_, finished_ = false;
};

}  // namespace ulysses

#include "core/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace ulysses {
namespace {

std::string human(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

Progress::Progress(std::string label, std::uint64_t total, std::string unit, std::string unit2)
    : label_(std::move(label)), unit_(std::move(unit)), unit2_(std::move(unit2)), total_(total),
      start_(std::chrono::steady_clock::now()), last_print_(start_), tty_(isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() {
  if (tty_ && !finished_) std::fputs("\n", stderr);
}

void Progress::add(std::uint64_t n, std::uint64_t n2) {
  done_ += n;
  done2_ += n2;
  maybe_print(false);
}

void Progress::finish() {
  maybe_print(true);
  std::lock_guard lock(mutex_);
  if (tty_ && !finished_) std::fputs("\n", stderr);
  finished_ = true;
}

std::string Progress::line() const {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double done = static_cast<double>(done_.load());
  std::string s = fmt::format("{}: {} {}", label_, human(done), unit_);
  if (total_ > 0) {
    double frac = done / static_cast<double>(total_);
    s = fmt::format("{}: {:5.1f}% {}/{} {}", label_, 100 * frac, human(done), human(double(total_)), unit_);
    if (tty_) {
      int width = 24, filled = static_cast<int>(frac * width);
      s = fmt::format("{} [{}{}]", s, std::string(filled, '#'), std::string(width - filled, '.'));
    }
    if (done > 0 && frac < 1) s += fmt::format(" ETA {:.0f}s", secs * (1 - frac) / frac);
  }
  if (secs > 0) {
    s += fmt::format(" | {} {}/s", human(done / secs), unit_);
    const double done2 = static_cast<double>(done2_.load());
    if (!unit2_.empty()) s += fmt::format(", {} {} at {} {}/s", human(done2), unit2_, human(done2 / secs), unit2_);
  }
  return s;
}

void Progress::maybe_print(bool force) {
  auto now = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  auto interval = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000);
  if (!force && now - last_print_ < interval) return;
  last_print_ = now;
  if (tty_) fmt::print(stderr, "\r\033[K{}", line());
  else fmt::print(stderr, "{}\n", line());
  std::fflush(stderr);
}

}  // namespace ulysses

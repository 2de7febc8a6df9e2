#include "pack/phase_timer.hpp"

#include <sys/resource.h>

#include <cstdlib>
#include <ctime>

#include "core/log.hpp"

namespace ulysses::pack {
namespace {

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

bool phase_timing_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ULYSSES_PACK_TIMING");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

PhaseTimer::PhaseTimer() : on_(phase_timing_enabled()), wall_(std::chrono::steady_clock::now()) {
  if (!on_) return;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  user_ = seconds(u.ru_utime);
  sys_ = seconds(u.ru_stime);
}

void PhaseTimer::mark(std::string_view name) {
  if (!on_) return;
  const auto now = std::chrono::steady_clock::now();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const double user = seconds(u.ru_utime), sys = seconds(u.ru_stime);
  log_info("phase {:<8} wall {:.3f} s, user {:.3f} s, sys {:.3f} s", name,
           std::chrono::duration<double>(now - wall_).count(), user - user_, sys - sys_);
  wall_ = now;
  user_ = user;
  sys_ = sys;
}

thread_local std::int64_t StepClock::last_ = 0;

StepClock::StepClock() : on_(phase_timing_enabled()) {}

void StepClock::start() {
  if (on_) last_ = thread_cpu_ns();
}

void StepClock::lap(Step step) {
  if (!on_) return;
  const std::int64_t now = thread_cpu_ns();
  ns_[static_cast<std::size_t>(step)] += now - last_;
  last_ = now;
}

void StepClock::log() const {
  if (!on_) return;
  auto s = [&](Step step) { return static_cast<double>(ns_[static_cast<std::size_t>(step)].load()) * 1e-9; };
  log_info("  pass 2 CPU (all threads): create {:.3f} s, gather {:.3f} s, write+hash {:.3f} s, close {:.3f} s",
           s(Step::kCreate), s(Step::kGather), s(Step::kWrite), s(Step::kClose));
}

}  // namespace ulysses::pack

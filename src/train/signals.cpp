#include "train/signals.hpp"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::train {
namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::int64_t g_first_int_ms = -1;   // CLOCK_MONOTONIC ms of the first SIGINT (a 64-bit store: one move)

// A second Ctrl-C, a second or more after the first (one Ctrl-C arrives several times within milliseconds: from the
// terminal to the whole group, and forwarded by mpiexec and launch/local.sh), ends the process at once, unsaved.
extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT) {
    timespec now {};
    clock_gettime(CLOCK_MONOTONIC, &now);   // async-signal-safe
    const std::int64_t ms = static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
    if (g_first_int_ms < 0) {
      g_first_int_ms = ms;
    } else if (ms - g_first_int_ms >= 1000) {
      std::signal(SIGINT, SIG_DFL);
      std::raise(SIGINT);
    }
  }
  g_signal = sig;
}
}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);   // also where a launcher's background start left it ignored
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return static_cast<int>(g_signal); }

std::optional<double> job_end_time(double end_time) {
  if (end_time > 0) return end_time;
  const char* text = std::getenv("SLURM_JOB_END_TIME");
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const double t = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(t > 0))
    throw BadInput(fmt::format("SLURM_JOB_END_TIME='{}' is not a time in seconds since the epoch", printable(text)),
                   "unset it, or pass --end-time");
  return t;
}

bool past_deadline(double now, double end, double step_seconds, double save_seconds, double margin) {
  return now + step_seconds + save_seconds + margin > end;
}

double now_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ulysses::train

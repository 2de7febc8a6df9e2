// Where the time of a pack goes, for tuning: with ULYSSES_PACK_TIMING=1 in the environment, run_pack
// logs one line per phase (wall, user and system CPU of the whole process) and pass 2 logs the CPU
// time its workers spent per step, summed over threads. Off by default: nothing is measured or logged.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace ulysses::pack {

bool phase_timing_enabled();   // ULYSSES_PACK_TIMING is set and not "0"

// Logs "phase NAME: wall W s, user U s, sys S s" for the time since the previous mark (or construction).
class PhaseTimer {
 public:
  PhaseTimer();
  void mark(std::string_view name);

 private:
  bool on_;
  std::chrono::steady_clock::time_point wall_;
  double user_ = 0, sys_ = 0;
};

// Thread CPU time spent in the steps of pass 2, summed over the worker threads: creating a shard (its
// HDF5 structure), gathering pieces into the buffer, writing (and hashing) the buffer, closing.
enum class Step { kCreate, kGather, kWrite, kClose, kCount };

class StepClock {
 public:
  StepClock();
  void start();         // on the calling thread
  void lap(Step step);  // adds the calling thread's CPU time since its previous lap (or start()) to `step`
  void log() const;

 private:
  bool on_;
  std::array<std::atomic<std::int64_t>, static_cast<std::size_t>(Step::kCount)> ns_{};
  static thread_local std::int64_t last_;
};

}  // namespace ulysses::pack

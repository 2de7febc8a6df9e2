// Watchdog: a thread that watches asynchronous work in flight (NCCL collectives enqueued on a CUDA stream)
// and ends the job when one fails or does not finish in time, instead of letting every rank hang.
//
// The owner registers each piece of work with a probe that says done / pending / failed (for NCCL: a CUDA
// event query, then ncclCommGetAsyncError). The thread polls the oldest pieces every `poll`; a failed
// probe, or a piece still pending `timeout` after it was registered, calls `on_fatal` once with one line
// ("NCCL all_to_all [8 MiB] on a group of 4 did not finish within 600 s — ..."). The default on_fatal
// (abort_job) prints the line and ends every rank through MPI_Abort. Torch- and CUDA-free: tested on CPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ulysses::dist {

struct Probe {
  enum class State { kDone, kPending, kFailed };
  State state = State::kPending;
  std::string why;   // for kFailed: what went wrong
};

class Watchdog {
 public:
  using ProbeFn = std::function<Probe()>;
  using FatalFn = std::function<void(const std::string&)>;

  // timeout: how long a piece may stay pending; 0 disables the timeout (failures still end the job).
  Watchdog(std::chrono::milliseconds timeout, FatalFn on_fatal,
           std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~Watchdog();   // stops the thread; pieces still pending are no longer watched
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void watch(std::string what, ProbeFn probe);
  std::size_t pending() const;   // pieces registered and not yet seen done

 private:
  struct Piece {
    std::string what;
    ProbeFn probe;
    std::chrono::steady_clock::time_point since;
  };
  void loop();
  bool check_front();   // false once on_fatal has been called

  const std::chrono::milliseconds timeout_, poll_;
  const FatalFn on_fatal_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Piece> pieces_;
  bool stop_ = false;
  std::thread thread_;
};

// The default on_fatal: "[rank R] fatal: <line>" on stderr, then MPI_Abort of MPI_COMM_WORLD (every rank ends).
[[noreturn]] void abort_job(const std::string& line);

}  // namespace ulysses::dist

// Watchdog: a thread that watches asynchronous work in flight (NCCL collectives enqueued on a CUDA stream)
// and ends the job when one fails or does not finish in time, instead of letting every rank hang.
//
// The owner registers each piece of work *before* issuing it (begin), then hands over a probe that says
// done / pending / failed once it is issued (Call::issued; for NCCL: a CUDA event query, then
// ncclCommGetAsyncError). Until then the piece is pending: NCCL connects peers lazily inside the first
// collective and blocks there when a peer is missing, and that wait is timed too. A Call destroyed without
// issued (the call threw) is dropped. The thread polls the oldest pieces every `poll`; a failed probe, or a
// piece still pending `timeout` after begin, calls `on_fatal` once with one line ("NCCL all_to_all [8 MiB]
// on a group of 4 did not finish within 600 s — ..."). The default on_fatal (abort_job) prints the line and
// ends every rank through MPI_Abort. Torch- and CUDA-free: tested on CPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
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
  struct Slot;   // one piece's probe, set when its work is issued

 public:
  using ProbeFn = std::function<Probe()>;
  using FatalFn = std::function<void(const std::string&)>;

  // A piece of work being issued: pending (and timed) from begin until issued(probe) hands over its probe.
  class Call {
   public:
    void issued(ProbeFn probe);
    ~Call();   // without issued (the call threw): the piece is dropped
    Call(Call&&) = default;
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    friend class Watchdog;
    explicit Call(std::shared_ptr<Slot> slot) : slot_(std::move(slot)) {}
    std::shared_ptr<Slot> slot_;
  };

  // timeout: how long a piece may stay pending; 0 disables the timeout (failures still end the job).
  // timeout_flag: the option that sets it, named in the timeout's hint ("--comm-timeout").
  Watchdog(std::chrono::milliseconds timeout, std::string timeout_flag, FatalFn on_fatal,
           std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~Watchdog();   // stops the thread; pieces still pending are no longer watched
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  Call begin(std::string what);   // before issuing the work `what` names
  std::size_t pending() const;    // pieces registered and not yet seen done

 private:
  struct Slot {
    std::mutex mu;
    ProbeFn probe;            // empty until issued
    bool abandoned = false;   // the Call went without issued
    Probe look();
  };
  struct Piece {
    std::string what;
    std::shared_ptr<Slot> slot;
    std::chrono::steady_clock::time_point since;
  };
  void loop();
  bool check_front();   // false once on_fatal has been called

  const std::chrono::milliseconds timeout_, poll_;
  const std::string timeout_flag_;
  const FatalFn on_fatal_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Piece> pieces_;
  bool stop_ = false;
  std::thread thread_;
};

// The default on_fatal: "[rank R] fatal: <line>" on stderr, then MPI_Abort of MPI_COMM_WORLD (every rank ends).
// Nothing is torn down first: a communicator abort may wait behind a kernel spinning in a collective
// (NVIDIA/nccl#549), and ending the process frees the GPU anyway.
[[noreturn]] void abort_job(const std::string& line);

}  // namespace ulysses::dist

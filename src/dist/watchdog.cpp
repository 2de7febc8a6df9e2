#include "dist/watchdog.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "dist/mpi_world.hpp"

namespace ulysses::dist {

Watchdog::Watchdog(std::chrono::milliseconds timeout, std::string timeout_flag, FatalFn on_fatal,
                   std::chrono::milliseconds poll)
    : timeout_(timeout), poll_(poll), timeout_flag_(std::move(timeout_flag)), on_fatal_(std::move(on_fatal)),
      thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Watchdog::Call Watchdog::begin(std::string what) {
  auto slot = std::make_shared<Slot>();
  std::lock_guard lock(mu_);
  pieces_.push_back({std::move(what), slot, std::chrono::steady_clock::now()});
  return Call(std::move(slot));
}

void Watchdog::Call::issued(ProbeFn probe) {
  ULY_CHECK(slot_ != nullptr && probe, "Watchdog::Call::issued on a moved-from call or with an empty probe");
  std::lock_guard lock(slot_->mu);
  slot_->probe = std::move(probe);
}

Watchdog::Call::~Call() {
  if (!slot_) return;   // moved from
  std::lock_guard lock(slot_->mu);
  if (!slot_->probe) slot_->abandoned = true;
}

Probe Watchdog::Slot::look() {
  ProbeFn p;
  {
    std::lock_guard lock(mu);
    if (abandoned) return {Probe::State::kDone, ""};
    if (!probe) return {Probe::State::kPending, ""};
    p = probe;
  }
  return p();
}

std::size_t Watchdog::pending() const {
  std::lock_guard lock(mu_);
  return pieces_.size();
}

// Pieces finish in the order they were enqueued on one stream, so only the oldest needs a look: drop the
// done ones from the front, then judge the first pending one.
bool Watchdog::check_front() {
  while (true) {
    Piece front;
    {
      std::lock_guard lock(mu_);
      if (pieces_.empty()) return true;
      front = pieces_.front();
    }
    const Probe p = front.slot->look();
    if (p.state == Probe::State::kDone) {
      std::lock_guard lock(mu_);
      pieces_.pop_front();
      continue;
    }
    if (p.state == Probe::State::kFailed) {
      on_fatal_(front.what + " failed: " + p.why);
      return false;
    }
    const auto waited = std::chrono::steady_clock::now() - front.since;
    if (timeout_.count() > 0 && waited > timeout_) {
      on_fatal_(fmt::format("{} did not finish within {:g} s (a peer rank died or hangs?) — HINT: check the other "
                            "ranks' logs; raise {} for work that is legitimately slow",
                            front.what, std::chrono::duration<double>(timeout_).count(), timeout_flag_));
      return false;
    }
    return true;
  }
}

void Watchdog::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, poll_, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    const bool alive = check_front();
    lock.lock();
    if (!alive) break;   // on_fatal was called (in a real run it does not return)
  }
}

void abort_job(const std::string& line) { abort_all(kExitFailure, "fatal: " + line); }

}  // namespace ulysses::dist

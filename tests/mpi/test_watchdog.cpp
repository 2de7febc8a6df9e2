// dist::Watchdog without MPI or a GPU: probes stand in for CUDA events, on_fatal records instead of aborting.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dist/watchdog.hpp"

namespace {

using namespace std::chrono_literals;
using ulysses::dist::Probe;
using ulysses::dist::Watchdog;

struct Fatal {
  std::mutex mu;
  std::string line;
  int calls = 0;
  Watchdog::FatalFn fn() {
    return [this](const std::string& l) {
      std::lock_guard lock(mu);
      line = l;
      ++calls;
    };
  }
  std::string get() {
    std::lock_guard lock(mu);
    return line;
  }
};

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST(Watchdog, ForgetsWorkThatFinishesInTime) {
  Fatal fatal;
  std::atomic<bool> done{false};
  Watchdog dog(2s, fatal.fn(), 10ms);
  dog.watch("NCCL all_to_all", [&] { return Probe{done ? Probe::State::kDone : Probe::State::kPending, ""}; });
  EXPECT_EQ(dog.pending(), 1u);
  done = true;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_EQ(fatal.calls, 0);
}

TEST(Watchdog, EndsTheJobWhenWorkHangsPastTheTimeout) {
  Fatal fatal;
  const auto start = std::chrono::steady_clock::now();
  Watchdog dog(200ms, fatal.fn(), 10ms);
  dog.watch("NCCL all_reduce_sum of Float [1024] on a group of 4", [] { return Probe{Probe::State::kPending, ""}; });
  ASSERT_TRUE(eventually([&] { return !fatal.get().empty(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_NE(fatal.get().find("NCCL all_reduce_sum of Float [1024] on a group of 4 did not finish within 0.2 s"),
            std::string::npos) << fatal.get();
  EXPECT_NE(fatal.get().find("--comm-timeout"), std::string::npos) << fatal.get();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fatal.calls, 1) << "on_fatal is called once";
}

TEST(Watchdog, EndsTheJobAtOnceWhenWorkFails) {
  Fatal fatal;
  Watchdog dog(1h, fatal.fn(), 10ms);
  dog.watch("NCCL broadcast", [] { return Probe{Probe::State::kFailed, "unhandled system error: peer closed"}; });
  ASSERT_TRUE(eventually([&] { return !fatal.get().empty(); }, 1s));
  EXPECT_EQ(fatal.get(), "NCCL broadcast failed: unhandled system error: peer closed");
}

TEST(Watchdog, JudgesPiecesInOrderAndNeverTimesOutWithZero) {
  Fatal fatal;
  std::atomic<int> finished{0};
  Watchdog dog(0ms, fatal.fn(), 5ms);   // 0: no timeout
  for (int i = 1; i <= 3; ++i)
    dog.watch("piece " + std::to_string(i),
              [&, i] { return Probe{finished >= i ? Probe::State::kDone : Probe::State::kPending, ""}; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(dog.pending(), 3u);
  finished = 2;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 1; }));
  finished = 3;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_EQ(fatal.calls, 0);
}

}  // namespace

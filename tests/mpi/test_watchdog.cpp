// dist::Watchdog without MPI or a GPU: probes stand in for CUDA events, on_fatal records instead of aborting.
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
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
  Watchdog dog(2s, "--comm-timeout", fatal.fn(), 10ms);
  dog.begin("NCCL all_to_all").issued([&] { return Probe{done ? Probe::State::kDone : Probe::State::kPending, ""}; });
  EXPECT_EQ(dog.pending(), 1u);
  done = true;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_EQ(fatal.calls, 0);
}

TEST(Watchdog, EndsTheJobWhenWorkHangsPastTheTimeout) {
  Fatal fatal;
  const auto start = std::chrono::steady_clock::now();
  Watchdog dog(200ms, "--save-timeout", fatal.fn(), 10ms);
  dog.begin("NCCL all_reduce_sum of Float [1024] on a group of 4").issued([] { return Probe{Probe::State::kPending, ""}; });
  ASSERT_TRUE(eventually([&] { return !fatal.get().empty(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_NE(fatal.get().find("NCCL all_reduce_sum of Float [1024] on a group of 4 did not finish within 0.2 s"),
            std::string::npos) << fatal.get();
  EXPECT_NE(fatal.get().find("raise --save-timeout for work"), std::string::npos) << fatal.get();   // the flag it was given
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fatal.calls, 1) << "on_fatal is called once";
}

TEST(Watchdog, EndsTheJobAtOnceWhenWorkFails) {
  Fatal fatal;
  Watchdog dog(1h, "--comm-timeout", fatal.fn(), 10ms);
  dog.begin("NCCL broadcast").issued([] { return Probe{Probe::State::kFailed, "unhandled system error: peer closed"}; });
  ASSERT_TRUE(eventually([&] { return !fatal.get().empty(); }, 1s));
  EXPECT_EQ(fatal.get(), "NCCL broadcast failed: unhandled system error: peer closed");
}

TEST(Watchdog, JudgesPiecesInOrderAndNeverTimesOutWithZero) {
  Fatal fatal;
  std::atomic<int> finished{0};
  Watchdog dog(0ms, "--comm-timeout", fatal.fn(), 5ms);   // 0: no timeout
  for (int i = 1; i <= 3; ++i)
    dog.begin("piece " + std::to_string(i)).issued(
        [&, i] { return Probe{finished >= i ? Probe::State::kDone : Probe::State::kPending, ""}; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(dog.pending(), 3u);
  finished = 2;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 1; }));
  finished = 3;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_EQ(fatal.calls, 0);
}

TEST(Watchdog, TimesACallThatBlocksBeforeItIsIssued) {
  // NCCL connects peers inside the first collective and blocks there when one is missing: the call never
  // returns to hand over its probe, and the watchdog must end the job anyway.
  Fatal fatal;
  Watchdog dog(150ms, "--comm-timeout", fatal.fn(), 10ms);
  Watchdog::Call call = dog.begin("NCCL all_to_all of BFloat16 [8, 4096] on a group of 8 (rank 3)");
  ASSERT_TRUE(eventually([&] { return !fatal.get().empty(); }, 2s));
  EXPECT_NE(fatal.get().find("NCCL all_to_all of BFloat16 [8, 4096] on a group of 8 (rank 3) did not finish within "
                             "0.15 s"), std::string::npos) << fatal.get();
}

TEST(Watchdog, PendingUntilIssuedThenJudgedByItsProbe) {
  Fatal fatal;
  std::atomic<bool> done{false};
  Watchdog dog(1h, "--comm-timeout", fatal.fn(), 5ms);
  Watchdog::Call call = dog.begin("NCCL all_gather");
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(dog.pending(), 1u) << "not issued yet: still watched";
  call.issued([&] { return Probe{done ? Probe::State::kDone : Probe::State::kPending, ""}; });
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(dog.pending(), 1u);
  done = true;
  EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
  EXPECT_EQ(fatal.calls, 0);
}

TEST(Watchdog, ACallThatThrowsBeforeIssuedIsDropped) {
  Fatal fatal;
  Watchdog dog(100ms, "--comm-timeout", fatal.fn(), 5ms);
  try {
    Watchdog::Call call = dog.begin("NCCL broadcast");
    throw std::runtime_error("ncclBroadcast failed: invalid argument");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(fatal.calls, 0) << "the thrown error is reported by the caller, not as a hang";
}

}  // namespace

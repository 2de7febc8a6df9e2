// Scale: 10M documents at seq_len 8192 through every policy. Prints time and peak memory; asserts only
// correctness (timing depends on the machine, so it is reported, never asserted).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "plan_checks.hpp"

namespace ulysses::pack {
namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;   // ru_maxrss is in KiB on Linux
}

template <typename F>
PackPlan timed(const char* name, std::size_t n, F&& plan_fn) {
  const double rss_before = peak_rss_mib();
  const auto start = std::chrono::steady_clock::now();
  PackPlan plan = plan_fn();
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  const double plan_mib = static_cast<double>(plan.pieces.capacity() * sizeof(Piece) +
                                              plan.seq_begin.capacity() * sizeof(std::uint64_t)) / (1 << 20);
  std::printf("%-7s %zu documents, seq_len 8192: %.2f s, %zu sequences, plan %.0f MiB, peak RSS +%.0f MiB\n", name,
              n, seconds.count(), plan.num_sequences(), plan_mib, peak_rss_mib() - rss_before);
  return plan;
}

TEST(PlanScale, TenMillionDocuments) {
  constexpr std::size_t kDocs = 10'000'000;
  constexpr std::uint32_t kSeqLen = 8192;
  const auto lengths = testing::uniform_lengths(kDocs, 1, 2 * kSeqLen, 1);   // a quarter longer than seq_len
  testing::Coverage coverage;
  // bfd first: the peak-RSS delta is then its own working memory plus its plan.
  EXPECT_TRUE(check_plan(timed("bfd", kDocs, [&] { return plan_bfd(lengths, kSeqLen); }), lengths, kSeqLen, coverage));
  EXPECT_TRUE(check_plan(timed("concat", kDocs, [&] { return plan_concat(lengths, kSeqLen); }), lengths, kSeqLen,
                         coverage));
  EXPECT_TRUE(check_plan(timed("pad", kDocs, [&] { return plan_pad(lengths, kSeqLen, LongDocs::kTruncate); }),
                         lengths, kSeqLen, coverage));
}

}  // namespace
}  // namespace ulysses::pack

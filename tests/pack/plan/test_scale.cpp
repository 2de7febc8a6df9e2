// Scale: 10M documents at seq_len 8192 through every policy. Prints time and peak memory; asserts only
// correctness (timing depends on the machine, so it is reported, never asserted).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <utility>

#include <gtest/gtest.h>

#include "plan_checks.hpp"

namespace ulysses::pack {
namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;   // ru_maxrss is in KiB on Linux
}

PackPlan timed(const char* name, const std::function<PackPlan()>& plan_fn) {
  const double rss_before = peak_rss_mib();
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  PackPlan plan = plan_fn();
  const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  const double plan_mib = static_cast<double>(plan.pieces.capacity() * sizeof(Piece) +
                                              plan.seq_begin.capacity() * sizeof(std::uint64_t)) / (1 << 20);
  std::printf("  %-7s %.2f s (%.2f s CPU), %zu sequences, plan %.0f MiB, peak RSS +%.0f MiB\n", name,
              seconds.count(), cpu_seconds, plan.num_sequences(), plan_mib, peak_rss_mib() - rss_before);
  return plan;
}

TEST(PlanScale, TenMillionDocuments) {
  constexpr std::size_t kDocs = 10'000'000;
  constexpr std::uint32_t kSeqLen = 8192;
  const auto lengths = plan_test::uniform_lengths(kDocs, 1, 2 * kSeqLen, 1);   // half longer than seq_len
  std::printf("%zu documents uniform in [1, %u], seq_len %u:\n", kDocs, 2 * kSeqLen, kSeqLen);
  const std::pair<const char*, std::function<PackPlan()>> policies[] = {
      {"bfd", [&] { return plan_bfd(lengths, kSeqLen); }},   // first: its RSS delta is its own
      {"concat", [&] { return plan_concat(lengths, kSeqLen); }},
      {"pad", [&] { return plan_pad(lengths, kSeqLen, LongDocs::kTruncate); }},
  };
  plan_test::Coverage coverage;
  for (const auto& [name, plan_fn] : policies)
    EXPECT_TRUE(plan_test::check_plan(timed(name, plan_fn), lengths, kSeqLen, coverage)) << name;
}

}  // namespace
}  // namespace ulysses::pack

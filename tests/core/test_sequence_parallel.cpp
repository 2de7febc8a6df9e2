// SequenceParallel: each rank's slice of a sequence from the RankLayout, and the one S % P check with its
// message and hint.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/sequence_parallel.hpp"

namespace ulysses {
namespace {

TEST(SequenceParallel, SlicesAreContiguousAndCoverTheSequence) {
  const RankLayout layout(8, 4);   // sp 4 × dp 2
  std::int64_t next = 0;
  for (int g : {0, 1, 2, 3}) {
    const SequenceParallel sp(layout, g, nullptr);
    EXPECT_EQ(sp.degree(), 4);
    EXPECT_EQ(sp.rank(), g);
    const SequenceSlice s = sp.slice(16, "test");
    ASSERT_EQ(s.ranges.size(), 1u);
    EXPECT_EQ(s.ranges[0].begin, next) << "rank " << g;
    EXPECT_EQ(s.size(), 4);
    next = s.ranges[0].end;
  }
  EXPECT_EQ(next, 16);
  const SequenceParallel second_replica(layout, 6, nullptr);   // dp rank 1, sp rank 2
  EXPECT_EQ(second_replica.rank(), 2);
  EXPECT_EQ(second_replica.slice(16, "test").ranges[0].begin, 8);
}

// --sp 8 --sp-ring 2 over 2 replicas: Ulysses 4 × ring 2. S = 32 in 4 chunks of 8: ring rank 0 holds chunks 0 and 3,
// ring rank 1 chunks 1 and 2, each split in pieces of 2 over the Ulysses ranks; every token once per replica.
TEST(SequenceParallel, ARingRankHoldsAHeadAndATailChunk) {
  const RankLayout layout(16, 8, 2);
  EXPECT_EQ(layout.ulysses(), 4);
  EXPECT_EQ(layout.ulysses_group_of(13), (std::vector<int>{12, 13, 14, 15}));   // dp 1, ring rank 1
  EXPECT_EQ(layout.ring_group_of(13), (std::vector<int>{9, 13}));               // dp 1, Ulysses rank 1
  std::vector<int> held(32, 0);
  for (int g = 8; g < 16; ++g) {
    const SequenceParallel sp(layout, g, nullptr);
    EXPECT_EQ(sp.ulysses_rank(), (g - 8) % 4);
    EXPECT_EQ(sp.ring_rank(), (g - 8) / 4);
    const SequenceSlice s = sp.slice(32, "test");
    ASSERT_EQ(s.ranges.size(), 2u);
    const std::int64_t r = sp.ring_rank(), u = sp.ulysses_rank();
    EXPECT_EQ(s.ranges[0].begin, r * 8 + u * 2) << "rank " << g;
    EXPECT_EQ(s.ranges[1].begin, (3 - r) * 8 + u * 2) << "rank " << g;
    for (const TokenRange& range : s.ranges)
      for (std::int64_t t = range.begin; t < range.end; ++t) ++held[t];
  }
  EXPECT_EQ(held, std::vector<int>(32, 1));
  EXPECT_THROW(RankLayout(8, 8, 3), BadInput);
  try {
    SequenceParallel(layout, 0, nullptr).slice(40, "DATA");
    ADD_FAILURE() << "S = 40 accepted at --sp 8 --sp-ring 2";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), "DATA: sequence length (40) is not divisible by 2 × --sp (8): --sp-ring 2 splits "
                                     "each sequence into 4 chunks of --sp / --sp-ring = 4 equal pieces");
    EXPECT_EQ(e.hint(), "the nearest valid lengths are 32 and 48");
  }
}

TEST(SequenceParallel, NoParallelismHoldsTheWholeSequence) {
  const SequenceParallel none;
  EXPECT_EQ(none.degree(), 1);
  EXPECT_EQ(none.ulysses_group(), nullptr);
  EXPECT_EQ(none.ring_group(), nullptr);
  EXPECT_EQ(none.slice(15, "test").ranges[0].begin, 0);
  EXPECT_EQ(none.slice(15, "test").ranges[0].end, 15);
}

std::pair<std::string, std::string> split_error(std::int64_t seq_len, std::int64_t sp, std::int64_t alignment) {
  try {
    check_sequence_split(seq_len, sp, "SOURCE", alignment);
  } catch (const BadInput& e) {
    return {e.what(), e.hint()};
  }
  return {"accepted", ""};
}

TEST(SequenceParallel, OneCheckNamesTheNumbersAndTheWayOut) {
  EXPECT_EQ(split_error(16, 4, 1).first, "accepted");
  EXPECT_EQ(split_error(1024, 4, 64).first, "accepted");
  EXPECT_EQ(split_error(130, 4, 1),
            std::make_pair(std::string("SOURCE: sequence length (130) is not divisible by the SP degree (4)"),
                           std::string("the nearest valid lengths are 128 and 132; or use --sp 1, 2, 5, 10, 13, 26, 65, 130")));
  EXPECT_EQ(split_error(1000, 4, 64),   // 1000 is no multiple of 64 at any degree: no --sp to offer
            std::make_pair(std::string("SOURCE: sequence length (1000) is not divisible by the SP degree (4) × alignment (64) = 256"),
                           std::string("the nearest valid lengths are 768 and 1024")));
  EXPECT_EQ(split_error(0, 2, 1).first, "SOURCE: the sequence length (0) must be positive");
  EXPECT_EQ(split_error(-64, 1, 64),   // it said "-64 is not a multiple of 64", and offered 64 as the nearest
            std::make_pair(std::string("SOURCE: the sequence length (-64) must be positive"),
                           std::string("a multiple of the SP degree × alignment (1 × 64)")));
  EXPECT_EQ(split_error(8, 0, 1).first, "SOURCE: the SP degree (0) and the alignment (1) must be positive");
  const std::int64_t huge = std::int64_t{1} << 32;   // huge × huge wraps to 0: no division by it
  EXPECT_EQ(split_error(128, huge, huge).first,
            "SOURCE: the SP degree (4294967296) × alignment (4294967296) exceeds the sequence length (128)");
  EXPECT_EQ(split_error(100, 128, 1).first, "SOURCE: the SP degree (128) × alignment (1) exceeds the sequence length (100)");
  EXPECT_EQ(split_unit(huge, huge), std::nullopt);
  EXPECT_EQ(split_unit(4, 64), 256);
  const SequenceParallel sp(RankLayout(2, 2), 1, nullptr);
  EXPECT_THROW(sp.slice(15, "test"), BadInput);
}

}  // namespace
}  // namespace ulysses

// SequenceParallel: each rank's slice of a sequence from the RankLayout, and the one S % P check with its
// message and hint.
#include <string>

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
    EXPECT_EQ(s.begin, next) << "rank " << g;
    EXPECT_EQ(s.size(), 4);
    next = s.end;
  }
  EXPECT_EQ(next, 16);
  const SequenceParallel second_replica(layout, 6, nullptr);   // dp rank 1, sp rank 2
  EXPECT_EQ(second_replica.rank(), 2);
  EXPECT_EQ(second_replica.slice(16, "test").begin, 8);
}

TEST(SequenceParallel, NoParallelismHoldsTheWholeSequence) {
  const SequenceParallel none;
  EXPECT_EQ(none.degree(), 1);
  EXPECT_EQ(none.group(), nullptr);
  EXPECT_EQ(none.slice(15, "test").begin, 0);
  EXPECT_EQ(none.slice(15, "test").end, 15);
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

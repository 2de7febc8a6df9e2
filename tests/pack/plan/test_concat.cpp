// plan_concat: the pieces, in plan order, are the corpus read front to back; every sequence is full;
// the incomplete tail is dropped and accounted.
#include <limits>

#include <gtest/gtest.h>

#include "plan_checks.hpp"

namespace ulysses::pack {
namespace {

using plan_test::check_plan;
using plan_test::Coverage;
using plan_test::sequences_of;
using plan_test::stats_of;

void expect_concat_plan(std::span<const std::uint32_t> lengths, std::uint32_t seq_len) {
  const PackPlan plan = plan_concat(lengths, seq_len);
  Coverage coverage;
  ASSERT_TRUE(check_plan(plan, lengths, seq_len, coverage));
  const std::uint64_t total = plan_test::total_tokens(lengths);
  EXPECT_EQ(plan.num_sequences(), total / seq_len);
  EXPECT_EQ(plan.stats.dropped_tokens, total % seq_len);
  EXPECT_EQ(plan.stats.truncated_tokens, 0u);
  EXPECT_EQ(plan.stats.padding_tokens, 0u);
  for (std::size_t s = 0; s < plan.num_sequences(); ++s)
    ASSERT_EQ(plan_test::sequence_tokens(plan, s), seq_len) << "sequence " << s;
  // The corpus in order: each piece starts where the previous one ended, or at the next document.
  std::uint32_t doc = 0, next_offset = 0;
  for (const Piece& piece : plan.pieces) {
    if (next_offset == lengths[doc]) {
      ++doc;
      next_offset = 0;
    }
    ASSERT_EQ(piece.doc, doc);
    ASSERT_EQ(piece.offset, next_offset);
    next_offset += piece.length;
  }
}

TEST(PlanConcat, ReadsTheCorpusInOrderIntoFullSequences) {
  for (const std::uint32_t seq_len : plan_test::kSeqLens)
    for (const std::size_t n : plan_test::kCorpusSizes) {
      SCOPED_TRACE(::testing::Message() << "seq_len " << seq_len << ", " << n << " documents");
      expect_concat_plan(plan_test::mixed_lengths(n, seq_len, 3000 * seq_len + n), seq_len);
      expect_concat_plan(plan_test::uniform_lengths(n, 1, seq_len, 11 * n + seq_len), seq_len);
    }
}

TEST(PlanConcat, SplitsAcrossSequencesAndDropsTheTail) {
  const std::vector<std::uint32_t> lengths = {3, 6, 2};   // 11 tokens: 2 sequences of 4, 3 dropped
  const PackPlan plan = plan_concat(lengths, 4);
  using T = plan_test::PieceTuple;
  const std::vector<std::vector<T>> expected = {{T{0, 0, 3}, T{1, 0, 1}}, {T{1, 1, 4}}};
  EXPECT_EQ(sequences_of(plan), expected);
  PlanStats stats;
  stats.split_documents = 1;     // doc 1: offsets 0 and 1, in consecutive sequences
  stats.dropped_tokens = 3;      // doc 1's last token and doc 2
  stats.dropped_documents = 1;   // doc 2
  EXPECT_EQ(stats_of(plan.stats), stats_of(stats));
}

TEST(PlanConcat, ADocumentCutOnlyByTheTailIsNotSplit) {
  const std::vector<std::uint32_t> lengths = {3, 3};
  const PackPlan plan = plan_concat(lengths, 4);
  using T = plan_test::PieceTuple;
  EXPECT_EQ(sequences_of(plan), (std::vector<std::vector<T>>{{T{0, 0, 3}, T{1, 0, 1}}}));
  EXPECT_EQ(plan.stats.split_documents, 0u);
  EXPECT_EQ(plan.stats.dropped_tokens, 2u);
  EXPECT_EQ(plan.stats.dropped_documents, 0u);
}

TEST(PlanConcat, CorpusShorterThanOneSequenceIsAllDropped) {
  const std::vector<std::uint32_t> lengths = {5, 1, 9};
  const PackPlan plan = plan_concat(lengths, 16);
  EXPECT_EQ(plan.num_sequences(), 0u);
  EXPECT_TRUE(plan.pieces.empty());
  EXPECT_EQ(plan.stats.dropped_tokens, 15u);
  EXPECT_EQ(plan.stats.dropped_documents, 3u);
  EXPECT_EQ(plan.stats.padding_tokens, 0u);
}

TEST(PlanConcat, LongDocumentsSpanManySequences) {
  expect_concat_plan(std::vector<std::uint32_t>{std::numeric_limits<std::uint32_t>::max(), 7}, 1u << 23);
  expect_concat_plan(std::vector<std::uint32_t>{1'000'000'007, 3, 999}, 1000);
}

}  // namespace
}  // namespace ulysses::pack

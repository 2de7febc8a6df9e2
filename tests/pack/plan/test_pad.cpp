// plan_pad: one document per sequence in corpus order; long ones truncated or dropped, all accounted.
#include <algorithm>

#include <gtest/gtest.h>

#include "plan_checks.hpp"

namespace ulysses::pack {
namespace {

using plan_test::check_plan;
using plan_test::Coverage;
using plan_test::sequences_of;
using plan_test::stats_of;

void expect_pad_plan(std::span<const std::uint32_t> lengths, std::uint32_t seq_len, LongDocs long_docs) {
  const PackPlan plan = plan_pad(lengths, seq_len, long_docs);
  Coverage coverage;
  ASSERT_TRUE(check_plan(plan, lengths, seq_len, coverage));
  std::size_t s = 0;
  std::uint64_t truncated = 0;
  for (std::uint32_t d = 0; d < lengths.size(); ++d) {
    if (lengths[d] > seq_len && long_docs == LongDocs::kDrop) {
      ASSERT_EQ(coverage.pieces[d], 0u);
      continue;
    }
    truncated += lengths[d] - std::min(lengths[d], seq_len);
    ASSERT_LT(s, plan.num_sequences());
    ASSERT_EQ(plan.seq_begin[s + 1] - plan.seq_begin[s], 1u) << "sequence " << s;
    const Piece& piece = plan.pieces[plan.seq_begin[s]];
    ASSERT_EQ(piece.doc, d);
    ASSERT_EQ(piece.length, std::min(lengths[d], seq_len));
    ++s;
  }
  EXPECT_EQ(s, plan.num_sequences());
  EXPECT_EQ(plan.stats.truncated_tokens, truncated);
  EXPECT_EQ(plan.stats.split_documents, 0u);
}

TEST(PlanPad, OneDocumentPerSequenceTruncatingOrDropping) {
  for (const LongDocs long_docs : {LongDocs::kTruncate, LongDocs::kDrop})
    for (const std::uint32_t seq_len : plan_test::kSeqLens)
      for (const std::size_t n : plan_test::kCorpusSizes) {
        SCOPED_TRACE(::testing::Message() << "seq_len " << seq_len << ", " << n << " documents, drop "
                                          << (long_docs == LongDocs::kDrop));
        expect_pad_plan(plan_test::mixed_lengths(n, seq_len, 5000 * seq_len + n), seq_len, long_docs);
      }
}

TEST(PlanPad, CountsTruncatedAndDroppedTokens) {
  const std::vector<std::uint32_t> lengths = {3, 12, 8, 1};
  using T = plan_test::PieceTuple;

  const PackPlan truncated = plan_pad(lengths, 8, LongDocs::kTruncate);
  EXPECT_EQ(sequences_of(truncated),
            (std::vector<std::vector<T>>{{T{0, 0, 3}}, {T{1, 0, 8}}, {T{2, 0, 8}}, {T{3, 0, 1}}}));
  PlanStats stats;
  stats.truncated_tokens = 4;
  stats.padding_tokens = 5 + 0 + 0 + 7;
  EXPECT_EQ(stats_of(truncated.stats), stats_of(stats));

  const PackPlan dropped = plan_pad(lengths, 8, LongDocs::kDrop);
  EXPECT_EQ(sequences_of(dropped), (std::vector<std::vector<T>>{{T{0, 0, 3}}, {T{2, 0, 8}}, {T{3, 0, 1}}}));
  stats = {};
  stats.dropped_tokens = 12;
  stats.dropped_documents = 1;
  stats.padding_tokens = 5 + 0 + 7;
  EXPECT_EQ(stats_of(dropped.stats), stats_of(stats));
}

}  // namespace
}  // namespace ulysses::pack

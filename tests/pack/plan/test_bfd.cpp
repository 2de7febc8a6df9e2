// plan_bfd: invariants on seeded corpora, exact agreement with a slow std::multiset reference, the tie
// rules on hand-made cases, and packing efficiency on uniform lengths.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "plan_checks.hpp"

namespace ulysses::pack {
namespace {

using plan_test::check_plan;
using plan_test::Coverage;
using plan_test::sequences_of;
using plan_test::stats_of;

// The obviously correct best-fit-decreasing: every piece of seq_len (and each remainder) is an item,
// one stable sort puts them longest first (ties: document, then offset), and open sequences live in a
// std::multiset keyed by (remaining capacity, -time filed): lower_bound gives the smallest capacity
// >= length and, among equal capacities, the latest filed.
PackPlan reference_bfd(std::span<const std::uint32_t> lengths, std::uint32_t seq_len) {
  std::vector<Piece> items;
  for (std::uint32_t d = 0; d < lengths.size(); ++d)
    for (std::uint32_t offset = 0; offset < lengths[d]; offset += seq_len)
      items.push_back(Piece{d, offset, std::min(seq_len, lengths[d] - offset)});
  std::stable_sort(items.begin(), items.end(),
                   [](const Piece& a, const Piece& b) { return a.length > b.length; });

  std::vector<std::vector<Piece>> sequences;
  std::multiset<std::tuple<std::uint32_t, std::int64_t, std::size_t>> open;   // capacity, -stamp, sequence
  std::int64_t stamp = 0;
  for (const Piece& item : items) {
    auto it = open.lower_bound({item.length, std::numeric_limits<std::int64_t>::min(), 0});
    std::uint32_t capacity = seq_len;
    std::size_t s = sequences.size();
    if (it == open.end()) {
      sequences.emplace_back();
    } else {
      std::tie(capacity, std::ignore, s) = *it;
      open.erase(it);
    }
    sequences[s].push_back(item);
    capacity -= item.length;
    if (capacity > 0) open.insert({capacity, -++stamp, s});
  }

  PackPlan plan;
  for (const auto& sequence : sequences) {
    plan.pieces.insert(plan.pieces.end(), sequence.begin(), sequence.end());
    plan.seq_begin.push_back(plan.pieces.size());
  }
  for (const std::uint32_t length : lengths) plan.stats.split_documents += length > seq_len;
  plan.stats.padding_tokens = std::uint64_t{seq_len} * sequences.size() - plan_test::total_tokens(lengths);
  return plan;
}

// BFD's own promises beyond the shared invariants: nothing lost; a document up to seq_len is one
// piece; a longer one is full seq_len pieces then its remainder.
void expect_bfd_plan(std::span<const std::uint32_t> lengths, std::uint32_t seq_len) {
  const PackPlan plan = plan_bfd(lengths, seq_len);
  Coverage coverage;
  ASSERT_TRUE(check_plan(plan, lengths, seq_len, coverage));
  EXPECT_EQ(plan.stats.truncated_tokens, 0u);
  EXPECT_EQ(plan.stats.dropped_tokens, 0u);
  EXPECT_EQ(plan.stats.dropped_documents, 0u);
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    ASSERT_EQ(coverage.tokens[d], lengths[d]) << "doc " << d;
    ASSERT_EQ(coverage.pieces[d], (std::uint64_t{lengths[d]} + seq_len - 1) / seq_len) << "doc " << d;
  }
  for (const Piece& piece : plan.pieces) {
    const std::uint32_t length = lengths[piece.doc];
    const bool remainder = piece.offset == length / seq_len * seq_len;
    ASSERT_EQ(piece.length, remainder ? length % seq_len : seq_len) << "doc " << piece.doc;
  }
}

TEST(PlanBfd, HoldsItsInvariantsOnMixedCorpora) {
  for (const std::uint32_t seq_len : plan_test::kSeqLens)
    for (const std::size_t n : plan_test::kCorpusSizes) {
      SCOPED_TRACE(::testing::Message() << "seq_len " << seq_len << ", " << n << " documents");
      expect_bfd_plan(plan_test::mixed_lengths(n, seq_len, 1000 * seq_len + n), seq_len);
      expect_bfd_plan(plan_test::uniform_lengths(n, 1, seq_len, 7 * n + seq_len), seq_len);
    }
}

TEST(PlanBfd, EqualsTheReferenceOnSmallCorpora) {
  std::mt19937_64 rng(20240611);
  for (int trial = 0; trial < 3000; ++trial) {
    // Short sequences crowd the buckets; long ones spread them over every level of the bitset.
    const auto seq_len = static_cast<std::uint32_t>(trial % 4 == 3 ? 64 + rng() % 300'000 : 1 + rng() % 40);
    const std::size_t n = rng() % 300;
    const auto lengths = trial % 2 == 0 ? plan_test::uniform_lengths(n, 1, 3 * seq_len, rng())
                                        : plan_test::mixed_lengths(n, seq_len, rng());
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", seq_len " << seq_len << ", n " << n);
    const PackPlan plan = plan_bfd(lengths, seq_len);
    const PackPlan expected = reference_bfd(lengths, seq_len);
    ASSERT_EQ(sequences_of(plan), sequences_of(expected));
    ASSERT_EQ(stats_of(plan.stats), stats_of(expected.stats));
  }
}

TEST(PlanBfd, BreaksTiesByIndexAndFillsTheLatestFiledSequenceFirst) {
  // Sorted: 6 (doc 0), 6 (doc 2), 4 (doc 1), 4 (doc 3), 3 (doc 4), 3 (doc 5). Docs 0 and 2 leave two
  // sequences with capacity 4; doc 1 takes the later one (LIFO), doc 3 the other.
  const std::vector<std::uint32_t> lengths = {6, 4, 6, 4, 3, 3};
  const PackPlan plan = plan_bfd(lengths, 10);
  using T = plan_test::PieceTuple;
  const std::vector<std::vector<T>> expected = {
      {T{0, 0, 6}, T{3, 0, 4}}, {T{2, 0, 6}, T{1, 0, 4}}, {T{4, 0, 3}, T{5, 0, 3}}};
  EXPECT_EQ(sequences_of(plan), expected);
  EXPECT_EQ(plan.stats.padding_tokens, 4u);
}

TEST(PlanBfd, PutsFullPiecesFirstAndPacksTheRemainder) {
  const std::vector<std::uint32_t> lengths = {3, 25, 10};
  const PackPlan plan = plan_bfd(lengths, 10);
  using T = plan_test::PieceTuple;
  const std::vector<std::vector<T>> expected = {
      {T{1, 0, 10}}, {T{1, 10, 10}}, {T{2, 0, 10}}, {T{1, 20, 5}, T{0, 0, 3}}};
  EXPECT_EQ(sequences_of(plan), expected);
  EXPECT_EQ(plan.stats.split_documents, 1u);
  EXPECT_EQ(plan.stats.padding_tokens, 2u);
}

// --long-docs truncate / drop: the plan is the reference's over the cut corpus (first seq_len tokens of each
// long document, or the long documents left out, indices kept), and the cut tokens are counted.
TEST(PlanBfd, TruncatesOrDropsLongDocumentsAsTheReferenceOverTheCutCorpus) {
  std::mt19937_64 rng(20261128);
  for (int trial = 0; trial < 400; ++trial) {
    const auto seq_len = static_cast<std::uint32_t>(1 + rng() % 40);
    const auto lengths = plan_test::mixed_lengths(rng() % 200, seq_len, rng());
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", seq_len " << seq_len);
    std::vector<std::uint32_t> truncated_lengths, kept, kept_lengths;
    PlanStats cut;
    for (std::uint32_t d = 0; d < lengths.size(); ++d) {
      truncated_lengths.push_back(std::min(lengths[d], seq_len));
      if (lengths[d] <= seq_len) {
        kept.push_back(d);
        kept_lengths.push_back(lengths[d]);
        continue;
      }
      cut.truncated_tokens += lengths[d] - seq_len;
      cut.dropped_tokens += lengths[d];
      ++cut.dropped_documents;
    }
    const PackPlan truncated = plan_bfd(lengths, seq_len, LongDocs::kTruncate);
    EXPECT_EQ(sequences_of(truncated), sequences_of(reference_bfd(truncated_lengths, seq_len)));
    EXPECT_EQ(truncated.stats.truncated_tokens, cut.truncated_tokens);
    EXPECT_EQ(truncated.stats.dropped_tokens + truncated.stats.split_documents, 0u);

    const PackPlan dropped = plan_bfd(lengths, seq_len, LongDocs::kDrop);
    PackPlan expected = reference_bfd(kept_lengths, seq_len);
    for (Piece& piece : expected.pieces) piece.doc = kept[piece.doc];
    EXPECT_EQ(sequences_of(dropped), sequences_of(expected));
    EXPECT_EQ(dropped.stats.dropped_tokens, cut.dropped_tokens);
    EXPECT_EQ(dropped.stats.dropped_documents, cut.dropped_documents);
    EXPECT_EQ(dropped.stats.padding_tokens, expected.stats.padding_tokens);
    EXPECT_EQ(dropped.stats.truncated_tokens + dropped.stats.split_documents, 0u);
  }
}

TEST(PlanBfd, HandlesHugeDocumentsAndHugeSeqLen) {
  const std::uint32_t seq_len = 1u << 23;
  const std::uint32_t longest = std::numeric_limits<std::uint32_t>::max();
  expect_bfd_plan(std::vector<std::uint32_t>{longest, 1, 5, seq_len, seq_len + 1}, seq_len);
  expect_bfd_plan(plan_test::uniform_lengths(5000, 1, 3 * seq_len, 5), seq_len);
  expect_bfd_plan(std::vector<std::uint32_t>{1'000'000'007, 3}, 1000);
}

TEST(PlanBfd, EmptyCorpusGivesAnEmptyPlan) {
  const PackPlan plan = plan_bfd({}, 128);
  EXPECT_EQ(plan.num_sequences(), 0u);
  EXPECT_TRUE(plan.pieces.empty());
  EXPECT_EQ(stats_of(plan.stats), stats_of(PlanStats{}));
}

TEST(PlanBfd, PacksUniformLengthsAbove95Percent) {
  for (const auto& [n, seq_len] : {std::pair<std::size_t, std::uint32_t>{1'000'000, 8192}, {200'000, 2048}}) {
    const auto lengths = plan_test::uniform_lengths(n, 1, seq_len, n);
    const PackPlan plan = plan_bfd(lengths, seq_len);
    const double efficiency = static_cast<double>(plan_test::total_tokens(lengths)) /
                              (static_cast<double>(seq_len) * static_cast<double>(plan.num_sequences()));
    std::printf("bfd efficiency, %zu documents uniform in [1, %u]: %.5f (%zu sequences)\n", n, seq_len,
                efficiency, plan.num_sequences());
    EXPECT_GT(efficiency, 0.95);
  }
}

TEST(PlanBfd, RejectsCallerBugs) {
  EXPECT_THROW(plan_bfd(std::vector<std::uint32_t>{3, 0, 2}, 8), std::logic_error);
  EXPECT_THROW(plan_bfd(std::vector<std::uint32_t>{3}, 0), std::logic_error);
  EXPECT_THROW(plan_pad(std::vector<std::uint32_t>{3}, 8, LongDocs::kSplit), std::logic_error);
}

}  // namespace
}  // namespace ulysses::pack

// Shared by the plan tests: seeded corpora, and the invariants every plan holds whatever its policy.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "pack/plan.hpp"

namespace ulysses::pack::plan_test {

// Lengths uniform in [lo, hi]. std::mt19937_64 is specified bit for bit, so corpora are the same everywhere.
inline std::vector<std::uint32_t> uniform_lengths(std::size_t n, std::uint32_t lo, std::uint32_t hi,
                                                  std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> lengths(n);
  const std::uint64_t span = std::uint64_t{hi} - lo + 1;
  for (auto& length : lengths) length = static_cast<std::uint32_t>(lo + rng() % span);
  return lengths;
}

// A corpus that hits every edge: length 1, exactly seq_len, multiples of seq_len, short, any, and long.
inline std::vector<std::uint32_t> mixed_lengths(std::size_t n, std::uint32_t seq_len, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> lengths(n);
  for (auto& length : lengths) {
    const std::uint64_t r = rng();
    switch (r % 8) {
      case 0: length = 1; break;
      case 1: length = seq_len; break;
      case 2: length = seq_len * static_cast<std::uint32_t>(2 + (r >> 8) % 3); break;
      case 3: length = 1 + static_cast<std::uint32_t>((r >> 8) % (seq_len / 8 + 1)); break;
      case 4: length = seq_len + 1 + static_cast<std::uint32_t>((r >> 8) % (3ULL * seq_len)); break;
      default: length = 1 + static_cast<std::uint32_t>((r >> 8) % seq_len); break;
    }
  }
  return lengths;
}

inline std::uint64_t total_tokens(std::span<const std::uint32_t> lengths) {
  std::uint64_t total = 0;
  for (const std::uint32_t length : lengths) total += length;
  return total;
}

inline std::uint64_t sequence_tokens(const PackPlan& plan, std::size_t s) {
  std::uint64_t tokens = 0;
  for (std::uint64_t p = plan.seq_begin[s]; p < plan.seq_begin[s + 1]; ++p) tokens += plan.pieces[p].length;
  return tokens;
}

// A plan as comparable, printable values.
using PieceTuple = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>;   // doc, offset, length
inline std::vector<std::vector<PieceTuple>> sequences_of(const PackPlan& plan) {
  std::vector<std::vector<PieceTuple>> sequences(plan.num_sequences());
  for (std::size_t s = 0; s < plan.num_sequences(); ++s)
    for (std::uint64_t p = plan.seq_begin[s]; p < plan.seq_begin[s + 1]; ++p)
      sequences[s].emplace_back(plan.pieces[p].doc, plan.pieces[p].offset, plan.pieces[p].length);
  return sequences;
}

inline std::vector<std::uint64_t> stats_of(const PlanStats& s) {
  return {s.split_documents, s.truncated_tokens, s.dropped_tokens, s.dropped_documents, s.padding_tokens};
}

// What a plan holds of each document: tokens covered and number of pieces.
struct Coverage {
  std::vector<std::uint64_t> tokens;
  std::vector<std::uint32_t> pieces;
};

// The invariants of every plan; on success fills `coverage`. Checked:
//  - CSR: seq_begin starts at 0, never decreases, ends at pieces.size(); no empty sequence;
//  - each piece is non-empty and inside its document; each sequence holds <= seq_len tokens;
//  - a document's pieces, in plan order, run contiguously from offset 0 (in order, no gap, no overlap);
//  - tokens not covered == truncated + dropped; dropped_documents == documents not covered;
//    split_documents == documents in more than one piece; padding == seq_len * sequences - covered.
inline ::testing::AssertionResult check_plan(const PackPlan& plan, std::span<const std::uint32_t> lengths,
                                             std::uint32_t seq_len, Coverage& coverage) {
  using ::testing::AssertionFailure;
  const auto& begin = plan.seq_begin;
  if (begin.empty() || begin.front() != 0 || begin.back() != plan.pieces.size())
    return AssertionFailure() << "seq_begin does not span the pieces";
  coverage = {std::vector<std::uint64_t>(lengths.size(), 0), std::vector<std::uint32_t>(lengths.size(), 0)};
  std::uint64_t packed = 0;
  for (std::size_t s = 0; s < plan.num_sequences(); ++s) {
    if (begin[s + 1] <= begin[s]) return AssertionFailure() << "sequence " << s << " is empty";
    std::uint64_t in_sequence = 0;
    for (std::uint64_t p = begin[s]; p < begin[s + 1]; ++p) {
      const Piece& piece = plan.pieces[p];
      if (piece.doc >= lengths.size() || piece.length == 0 ||
          std::uint64_t{piece.offset} + piece.length > lengths[piece.doc])
        return AssertionFailure() << "piece " << p << " (doc " << piece.doc << ", offset " << piece.offset
                                  << ", length " << piece.length << ") is not inside its document";
      if (piece.offset != coverage.tokens[piece.doc])
        return AssertionFailure() << "piece " << p << " of doc " << piece.doc << " starts at " << piece.offset
                                  << ", expected " << coverage.tokens[piece.doc];
      coverage.tokens[piece.doc] += piece.length;
      ++coverage.pieces[piece.doc];
      in_sequence += piece.length;
    }
    if (in_sequence > seq_len)
      return AssertionFailure() << "sequence " << s << " holds " << in_sequence << " > " << seq_len;
    packed += in_sequence;
  }
  std::uint64_t uncovered = 0, dropped_documents = 0, split_documents = 0;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    uncovered += lengths[d] - coverage.tokens[d];
    dropped_documents += coverage.pieces[d] == 0;
    split_documents += coverage.pieces[d] > 1;
  }
  const PlanStats& st = plan.stats;
  if (uncovered != st.truncated_tokens + st.dropped_tokens)
    return AssertionFailure() << uncovered << " tokens missing, but truncated " << st.truncated_tokens
                              << " + dropped " << st.dropped_tokens;
  if (dropped_documents != st.dropped_documents)
    return AssertionFailure() << dropped_documents << " documents missing, stats: " << st.dropped_documents;
  if (split_documents != st.split_documents)
    return AssertionFailure() << split_documents << " documents split, stats say " << st.split_documents;
  if (st.padding_tokens != std::uint64_t{seq_len} * plan.num_sequences() - packed)
    return AssertionFailure() << "padding " << st.padding_tokens << " != " << seq_len << " * "
                              << plan.num_sequences() << " - " << packed;
  return ::testing::AssertionSuccess();
}

// Sequence lengths and corpus sizes the policy tests sweep.
inline constexpr std::uint32_t kSeqLens[] = {1, 2, 3, 7, 64, 1000, 8192};
inline constexpr std::size_t kCorpusSizes[] = {0, 1, 2, 5, 100, 1000, 20000};

}  // namespace ulysses::pack::plan_test

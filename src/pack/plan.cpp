// Packing plans (see plan.hpp). Contract of this file:
//  - bfd (--long-docs split): the pieces of seq_len of documents longer than seq_len come first, one per sequence, in
//    document order (they are the longest items, ties by index); the remainders r = length % seq_len
//    are then placed longest first (ties: lower document index first) into the open sequence with the
//    smallest remaining capacity >= r, the one most recently filed at that capacity among equals
//    (LIFO), or into a new sequence. Sequences are numbered in order of opening. truncate / drop first cut
//    long documents to seq_len tokens / leave them out, then plan the rest the same way.
//  - Memory beyond the plan itself, at peak: 12 bytes per document (sorted order, sequence of each
//    remainder, open-sequence links) and ~8 bytes per unit of seq_len (sorted runs, open-sequence
//    stacks); no trees. Time: a few linear passes plus O(log64 seq_len) per remainder.
//  - Zero-length documents and seq_len 0 are caller bugs (ULY_CHECK), as are more than 2^32 - 1
//    documents (Piece::doc is 32-bit).
// Not here: tokens, files, threads.
#include "pack/plan.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <utility>

#include "core/error.hpp"

namespace ulysses::pack {
namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// Validates the inputs every policy shares and returns the corpus's token count.
std::uint64_t checked_total(std::span<const std::uint32_t> lengths, std::uint32_t seq_len) {
  ULY_CHECK(seq_len >= 1, "seq_len must be >= 1");
  ULY_CHECK(lengths.size() < kNone, "{} documents exceed the 32-bit document index", lengths.size());
  std::uint64_t total = 0;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    ULY_CHECK(lengths[d] > 0, "document {} is empty (callers skip empty documents)", d);
    total += lengths[d];
  }
  return total;
}

void close_stats(PackPlan& plan, std::uint64_t total, std::uint32_t seq_len) {
  const std::uint64_t packed = total - plan.stats.truncated_tokens - plan.stats.dropped_tokens;
  plan.stats.padding_tokens = std::uint64_t{seq_len} * plan.num_sequences() - packed;
}

// A set of integers in [0, size) that finds its smallest member >= i in O(log64 size) steps: level 0
// holds one bit per integer, each level above one bit per non-zero word of the level below, and the
// top level is a single word.
class SuccessorSet {
 public:
  static constexpr std::uint64_t kAbsent = std::numeric_limits<std::uint64_t>::max();

  explicit SuccessorSet(std::uint64_t size) {
    do {
      size = (size + 63) / 64;
      levels_.emplace_back(size, 0);
    } while (size > 1);
  }

  void insert(std::uint64_t i) {
    for (auto& level : levels_) {
      std::uint64_t& word = level[i / 64];
      const bool was_empty = word == 0;
      word |= std::uint64_t{1} << (i % 64);
      if (!was_empty) return;
      i /= 64;
    }
  }

  void erase(std::uint64_t i) {
    for (auto& level : levels_) {
      std::uint64_t& word = level[i / 64];
      word &= ~(std::uint64_t{1} << (i % 64));
      if (word != 0) return;
      i /= 64;
    }
  }

  std::uint64_t next(std::uint64_t i) const {
    std::size_t l = 0;
    for (;; ++l) {   // climb until some word holds a member at or after i
      if (l == levels_.size() || i / 64 >= levels_[l].size()) return kAbsent;
      const std::uint64_t word = levels_[l][i / 64] & (~std::uint64_t{0} << (i % 64));
      if (word != 0) {
        i = (i & ~std::uint64_t{63}) | static_cast<std::uint64_t>(std::countr_zero(word));
        break;
      }
      i = i / 64 + 1;
    }
    while (l-- > 0) i = i * 64 + static_cast<std::uint64_t>(std::countr_zero(levels_[l][i]));
    return i;
  }

 private:
  std::vector<std::vector<std::uint64_t>> levels_;
};

// Open sequences filed by remaining capacity: a LIFO stack per capacity (intrusive lists), and a
// SuccessorSet of the non-empty capacities.
class OpenSequences {
 public:
  struct Slot {
    std::uint32_t seq;
    std::uint32_t capacity;
  };

  OpenSequences(std::uint32_t seq_len, std::size_t max_sequences)
      : top_(seq_len, kNone), below_(max_sequences, kNone), non_empty_(seq_len) {}

  // Removes and returns the open sequence with the smallest capacity >= len, if any.
  std::optional<Slot> take_best_fit(std::uint32_t len) {
    const std::uint64_t capacity = non_empty_.next(len);
    if (capacity == SuccessorSet::kAbsent) return std::nullopt;
    const std::uint32_t seq = top_[capacity];
    top_[capacity] = below_[seq];
    if (top_[capacity] == kNone) non_empty_.erase(capacity);
    return Slot{seq, static_cast<std::uint32_t>(capacity)};
  }

  void file(Slot slot) {   // 0 < capacity < seq_len
    if (top_[slot.capacity] == kNone) non_empty_.insert(slot.capacity);
    below_[slot.seq] = top_[slot.capacity];
    top_[slot.capacity] = slot.seq;
  }

 private:
  std::vector<std::uint32_t> top_;     // [seq_len] latest filed sequence per capacity, or kNone
  std::vector<std::uint32_t> below_;   // [sequences] the next sequence down the same stack
  SuccessorSet non_empty_;
};

// The documents with a non-zero remainder length % seq_len, longest remainder first, ties by index
// (a stable counting sort over the remainder), in runs of equal remainder.
struct ByRemainder {
  std::vector<std::uint32_t> docs;
  std::vector<std::uint32_t> end;   // [seq_len + 1] remainder r's run is docs[end[r + 1] .. end[r])
};

ByRemainder by_remainder_descending(std::span<const std::uint32_t> lengths, std::uint32_t seq_len) {
  ByRemainder sorted;
  std::vector<std::uint32_t>& slot = sorted.end;   // count, then next position, per remainder
  slot.assign(std::size_t{seq_len} + 1, 0);
  for (const std::uint32_t length : lengths) ++slot[length % seq_len];
  std::uint32_t position = 0;
  for (std::uint32_t r = seq_len - 1; r >= 1; --r) position += std::exchange(slot[r], position);
  sorted.docs.resize(position);
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    const std::uint32_t r = lengths[d] % seq_len;
    if (r != 0) sorted.docs[slot[r]++] = static_cast<std::uint32_t>(d);
  }
  return sorted;
}

// Places one remainder of length len; returns its sequence, counted from `first`. A new sequence
// appends its piece count to plan.seq_begin.
std::uint32_t place(std::uint32_t len, std::uint32_t seq_len, std::size_t first, OpenSequences& open,
                    PackPlan& plan) {
  OpenSequences::Slot slot{0, seq_len};
  if (auto found = open.take_best_fit(len)) {
    slot = *found;
  } else {
    slot.seq = static_cast<std::uint32_t>(plan.num_sequences() - first);
    plan.seq_begin.push_back(0);
  }
  ++plan.seq_begin[first + 1 + slot.seq];
  slot.capacity -= len;
  if (slot.capacity > 0) open.file(slot);
  return slot.seq;
}

// Best fit of the sorted remainders into sequences opened after the existing ones; returns each
// remainder's sequence (counted from there), aligned with sorted.docs.
std::vector<std::uint32_t> best_fit(const ByRemainder& sorted, std::uint32_t seq_len, PackPlan& plan) {
  const std::size_t first = plan.num_sequences();
  OpenSequences open(seq_len, sorted.docs.size());
  std::vector<std::uint32_t> seq_of(sorted.docs.size());
  for (std::uint32_t len = seq_len - 1; len >= 1; --len)
    for (std::uint32_t i = sorted.end[len + 1]; i < sorted.end[len]; ++i)
      seq_of[i] = place(len, seq_len, first, open, plan);
  return seq_of;
}

// Writes the remainders into their sequences' CSR slots in placement order. On entry
// seq_begin[first + 1 + s] holds new sequence s's piece count; it is turned into s's start, then
// advanced past each piece written, so it ends as s's end = the start of s + 1.
void scatter(std::span<const std::uint32_t> docs, std::span<const std::uint32_t> seq_of,
             std::span<const std::uint32_t> lengths, std::uint32_t seq_len, std::size_t first,
             PackPlan& plan) {
  std::uint64_t start = plan.seq_begin[first];
  for (std::size_t s = first + 1; s < plan.seq_begin.size(); ++s)
    start += std::exchange(plan.seq_begin[s], start);
  plan.pieces.resize(start);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::uint32_t length = lengths[docs[i]];
    const std::uint32_t r = length % seq_len;
    plan.pieces[plan.seq_begin[first + 1 + seq_of[i]]++] = Piece{docs[i], length - r, r};
  }
}

// The seq_len pieces of long documents (and documents of exactly seq_len), one sequence each.
// Reserves room for every piece of the plan, remainders included.
void place_full_pieces(std::span<const std::uint32_t> lengths, std::uint32_t seq_len, PackPlan& plan) {
  std::uint64_t full = 0;
  std::uint64_t remainders = 0;
  for (const std::uint32_t length : lengths) {
    full += length / seq_len;
    remainders += length % seq_len != 0;
  }
  plan.pieces.reserve(full + remainders);
  plan.seq_begin.reserve(full + 1);
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    for (std::uint32_t offset = 0; lengths[d] - offset >= seq_len; offset += seq_len) {
      plan.pieces.push_back(Piece{static_cast<std::uint32_t>(d), offset, seq_len});
      plan.seq_begin.push_back(plan.pieces.size());
    }
    if (lengths[d] > seq_len) ++plan.stats.split_documents;
  }
}

// bfd over every document whole or cut into pieces.
PackPlan plan_bfd_split(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len) {
  const std::uint64_t total = checked_total(doc_lengths, seq_len);
  PackPlan plan;
  place_full_pieces(doc_lengths, seq_len, plan);
  const std::size_t first = plan.num_sequences();
  const ByRemainder sorted = by_remainder_descending(doc_lengths, seq_len);
  const std::vector<std::uint32_t> seq_of = best_fit(sorted, seq_len, plan);
  scatter(sorted.docs, seq_of, doc_lengths, seq_len, first, plan);
  close_stats(plan, total, seq_len);
  return plan;
}

}  // namespace

PackPlan plan_bfd(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len, LongDocs long_docs) {
  if (long_docs == LongDocs::kSplit) return plan_bfd_split(doc_lengths, seq_len);
  const std::uint64_t total = checked_total(doc_lengths, seq_len);
  std::vector<std::uint32_t> kept;      // the documents planned, in corpus order
  std::vector<std::uint32_t> lengths;   // [kept] their lengths, at most seq_len
  PlanStats cut;
  for (std::size_t d = 0; d < doc_lengths.size(); ++d) {
    const std::uint32_t length = doc_lengths[d];
    if (length > seq_len && long_docs == LongDocs::kDrop) {
      ++cut.dropped_documents;
      cut.dropped_tokens += length;
      continue;
    }
    if (length > seq_len) cut.truncated_tokens += length - seq_len;
    kept.push_back(static_cast<std::uint32_t>(d));
    lengths.push_back(std::min(length, seq_len));
  }
  PackPlan plan = kept.empty() ? PackPlan{} : plan_bfd_split(lengths, seq_len);
  for (Piece& piece : plan.pieces) piece.doc = kept[piece.doc];   // order kept: ties by index still hold
  plan.stats.truncated_tokens = cut.truncated_tokens;
  plan.stats.dropped_tokens = cut.dropped_tokens;
  plan.stats.dropped_documents = cut.dropped_documents;
  close_stats(plan, total, seq_len);
  return plan;
}

PackPlan plan_concat(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len) {
  const std::uint64_t total = checked_total(doc_lengths, seq_len);
  const std::uint64_t sequences = total / seq_len;
  const std::uint64_t kept = sequences * seq_len;
  PackPlan plan;
  plan.stats.dropped_tokens = total - kept;
  plan.seq_begin.reserve(sequences + 1);
  plan.pieces.reserve(std::min<std::uint64_t>(doc_lengths.size(), kept) + sequences);
  std::uint64_t emitted = 0;   // tokens in pieces so far
  std::size_t d = 0;
  for (; d < doc_lengths.size() && emitted < kept; ++d) {
    std::uint32_t offset = 0;
    while (offset < doc_lengths[d] && emitted < kept) {
      const std::uint64_t room = seq_len - emitted % seq_len;
      const auto length = static_cast<std::uint32_t>(std::min<std::uint64_t>(doc_lengths[d] - offset, room));
      plan.pieces.push_back(Piece{static_cast<std::uint32_t>(d), offset, length});
      offset += length;
      emitted += length;
      if (emitted % seq_len == 0) plan.seq_begin.push_back(plan.pieces.size());
    }
    if (plan.pieces.back().offset > 0) ++plan.stats.split_documents;   // its last piece is not its first
  }
  plan.stats.dropped_documents = doc_lengths.size() - d;
  close_stats(plan, total, seq_len);
  return plan;
}

PackPlan plan_pad(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len, LongDocs long_docs) {
  ULY_CHECK(long_docs != LongDocs::kSplit, "pad keeps one piece per document: truncate or drop");
  const std::uint64_t total = checked_total(doc_lengths, seq_len);
  PackPlan plan;
  plan.pieces.reserve(doc_lengths.size());
  plan.seq_begin.reserve(doc_lengths.size() + 1);
  for (std::size_t d = 0; d < doc_lengths.size(); ++d) {
    const std::uint32_t length = doc_lengths[d];
    if (length > seq_len && long_docs == LongDocs::kDrop) {
      ++plan.stats.dropped_documents;
      plan.stats.dropped_tokens += length;
      continue;
    }
    if (length > seq_len) plan.stats.truncated_tokens += length - seq_len;
    plan.pieces.push_back(Piece{static_cast<std::uint32_t>(d), 0, std::min(length, seq_len)});
    plan.seq_begin.push_back(plan.pieces.size());
  }
  close_stats(plan, total, seq_len);
  return plan;
}

}  // namespace ulysses::pack

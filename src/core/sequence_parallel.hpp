// SequenceParallel: the one handle of a rank's sequence-parallel group, built once from the RankLayout. It answers
// the SP degree P = U × R (Ulysses degree U, ring degree R: RankLayout), this rank's indices, the tokens of a sequence
// the rank holds, and carries the communicators the model's attention uses: the Ulysses group's (all-to-alls) and the
// ring group's (K/V blocks). The data loader, the model and the reports take it; nobody else computes a slice or
// checks S against the layout (check_ring_split, which is check_sequence_split without a ring, is the one check).
//
// Which tokens: with R = 1, rank r holds [r·S/P, (r+1)·S/P). With a ring the sequence is 2R chunks of C = S/(2R)
// tokens and ring rank j's block is chunks j and 2R−1−j (the head-tail balance of causal attention: every block has
// the same work); Ulysses rank u holds the u-th of U equal pieces of each of its block's two chunks, so the Ulysses
// all-to-all gathers the block.
//
// Torch-free: the communicators are opaque pointers here (core never calls them); the model checks their sizes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"

namespace ulysses {

namespace comm {
class Communicator;
}

// [begin, end) of a sequence, in tokens.
struct TokenRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

// The tokens a rank holds, in the order it holds them: one range, or two with a ring.
struct SequenceSlice {
  std::vector<TokenRange> ranges;
  std::int64_t size() const;
};

// Ring block j of a sequence of seq_len tokens in 2·ring chunks: chunks j and 2·ring − 1 − j, in that order.
std::array<TokenRange, 2> ring_block(std::int64_t seq_len, std::int64_t ring, std::int64_t j);

// sp × alignment, or nullopt when either is below 1 or the product overflows (hostile attributes, flags):
// every `S % (sp × alignment)` goes through this so none divides by a wrapped zero.
std::optional<std::int64_t> split_unit(std::int64_t sp, std::int64_t alignment);

// BadInput unless seq_len is a positive multiple of sp × alignment: "SOURCE: sequence length (S) is not
// divisible by the SP degree (P)", with the nearest valid lengths and the valid SP degrees as the hint; or,
// when sp × alignment exceeds S (or overflows), one line saying so.
void check_sequence_split(std::int64_t seq_len, std::int64_t sp, const std::string& source,
                          std::int64_t alignment = 1);

// check_sequence_split for a ring of degree `ring` inside SP degree `sp`: S must split into 2·ring chunks of sp/ring
// equal pieces (S % 2·sp == 0, × alignment); one line naming both flags. ring = 1 is check_sequence_split.
void check_ring_split(std::int64_t seq_len, std::int64_t sp, std::int64_t ring, const std::string& source,
                      std::int64_t alignment = 1);

class SequenceParallel {
 public:
  SequenceParallel() = default;   // no sequence parallelism: P = 1, no communicator
  // The SP group of `global_rank` in `layout`. The communicators are not owned and may be null where no collective
  // is called (the data loader's tests): `ulysses`, the Ulysses group's (with R = 1 the SP group's); `ring`, the ring
  // group's (R > 1 only); `ulysses_ahead`, a second communicator of the Ulysses group for the all-to-alls head groups
  // issue ahead on a side stream (NCCL runs a communicator's operations one after another in the order issued,
  // whatever their streams: on the Ulysses group's own, the current group's all-to-all back would wait for the next
  // group's projections) — null: the Ulysses group's.
  SequenceParallel(const RankLayout& layout, int global_rank, comm::Communicator* ulysses,
                   comm::Communicator* ring = nullptr, comm::Communicator* ulysses_ahead = nullptr);

  std::int64_t degree() const { return degree_; }            // P = U × R
  std::int64_t rank() const { return rank_; }                // this rank's index in its SP group, 0 ≤ rank < P
  std::int64_t ulysses_degree() const { return degree_ / ring_; }   // U
  std::int64_t ring_degree() const { return ring_; }         // R
  std::int64_t ulysses_rank() const { return rank_ % ulysses_degree(); }
  std::int64_t ring_rank() const { return rank_ / ulysses_degree(); }
  comm::Communicator* ulysses_group() const { return ulysses_; }   // null when U = 1 or none was given
  comm::Communicator* ring_group() const { return ring_group_; }   // null when R = 1 or none was given
  comm::Communicator* ulysses_ahead_group() const { return ulysses_ahead_ ? ulysses_ahead_ : ulysses_; }

  // This rank's tokens of a sequence of seq_len tokens; check_ring_split first.
  SequenceSlice slice(std::int64_t seq_len, const std::string& source) const;

 private:
  std::int64_t degree_ = 1, rank_ = 0, ring_ = 1;
  comm::Communicator* ulysses_ = nullptr;
  comm::Communicator* ring_group_ = nullptr;
  comm::Communicator* ulysses_ahead_ = nullptr;
};

}  // namespace ulysses

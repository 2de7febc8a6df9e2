// SequenceParallel: the one handle of a rank's sequence-parallel (Ulysses) group, built once from the
// RankLayout. It answers the SP degree P, this rank's index in its group, the slice [begin, end) of a
// sequence the rank holds (contiguous: rank r holds tokens [r·S/P, (r+1)·S/P)), and carries the group's
// communicator for the model's all-to-alls. The data loader, the model and the reports take it; nobody
// else computes a slice or checks S % P (check_sequence_split is the one check, with one message).
//
// Torch-free: the communicator is an opaque pointer here (core never calls it); the model checks that
// its size is P. A later axis (ring attention inside the group) changes slice() and adds fields here,
// not the code that asks for a slice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/rank_layout.hpp"

namespace ulysses {

namespace comm {
class Communicator;
}

// [begin, end) of a sequence, in tokens.
struct SequenceSlice {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

// sp × alignment, or nullopt when either is below 1 or the product overflows (hostile attributes, flags):
// every `S % (sp × alignment)` goes through this so none divides by a wrapped zero.
std::optional<std::int64_t> split_unit(std::int64_t sp, std::int64_t alignment);

// BadInput unless seq_len is a positive multiple of sp × alignment: "SOURCE: sequence length (S) is not
// divisible by the SP degree (P)", with the nearest valid lengths and the valid SP degrees as the hint; or,
// when sp × alignment exceeds S (or overflows), one line saying so.
void check_sequence_split(std::int64_t seq_len, std::int64_t sp, const std::string& source,
                          std::int64_t alignment = 1);

class SequenceParallel {
 public:
  SequenceParallel() = default;   // no sequence parallelism: P = 1, no communicator
  // The SP group of `global_rank` in `layout`; `group` is that group's communicator (not owned; may be
  // null where no collective is called, e.g. the data loader's tests).
  SequenceParallel(const RankLayout& layout, int global_rank, comm::Communicator* group);

  std::int64_t degree() const { return degree_; }      // P
  std::int64_t rank() const { return rank_; }          // this rank's index in its SP group, 0 ≤ rank < P
  comm::Communicator* group() const { return group_; } // null when P = 1 or none was given

  // This rank's tokens of a sequence of seq_len tokens; check_sequence_split first.
  SequenceSlice slice(std::int64_t seq_len, const std::string& source) const;

 private:
  std::int64_t degree_ = 1, rank_ = 0;
  comm::Communicator* group_ = nullptr;
};

}  // namespace ulysses

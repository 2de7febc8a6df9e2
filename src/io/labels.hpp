// Labels, position ids and document ids of a slice of a packed sequence, derived exactly as for the
// whole sequence (the SP-invariance of the loss rests on this).
//
// For position i of a sequence with length L and document starts D:
//   label[i]    = ids[i+1]  if i+1 < L, i+1 is not in D, and mask[i+1] == 1;  otherwise -100
//   position[i] = i - max{d in D : d <= i}                      (for i < L)
//                 i - L                                         (padding: its own run from 0)
//   doc[i]      = index of max{d in D : d <= i}                 (for i < L);  |D| for padding
// so attention is causal within one document, and padding attends only to padding.
#pragma once

#include <cstdint>
#include <span>

#include "io/shard.hpp"

namespace ulysses::shard {

// Slice [begin, begin + n) of a sequence. ids_plus1 / mask_plus1 hold n + 1 values: the slice and the
// token after it (any value when begin + n == seq_len: it is never used). Outputs hold n values.
void slice_labels(const SequenceMeta& meta, std::int64_t begin, std::span<const std::int32_t> ids_plus1,
                  std::span<const std::uint8_t> mask_plus1, std::span<std::int64_t> labels);
void slice_positions(const SequenceMeta& meta, std::int64_t begin, std::span<std::int64_t> positions);
void slice_doc_ids(const SequenceMeta& meta, std::int64_t begin, std::span<std::int64_t> doc_ids);

}  // namespace ulysses::shard

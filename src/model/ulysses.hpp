// Ulysses sequence parallelism: the reshapes around the all-to-all.
//
// Before attention each rank of an SP group of P ranks holds S/P consecutive tokens of every head; the
// exchange gives it every token of H/P heads, attention runs locally, and the inverse exchange restores
// the token sharding. Rank r holds its slice of the tokens (SequenceParallel::slice, contiguous) and
// heads [r*h/P, (r+1)*h/P). The exchange itself is comm::all_to_all_autograd (its own adjoint);
// everything here is a reshape around it.
// Shape letters: see rms_norm.hpp. Here h is the number of heads of the tensor (H for queries, Hkv or P
// for keys and values).
#pragma once

#include <cstdint>

#include <torch/types.h>

#include "comm/communicator.hpp"

namespace ulysses::model {

// Sequence-sharded → head-sharded: [B, S/P, h, D] → [B, S, h/P, D]. Requires h % P == 0.
torch::Tensor scatter_heads_gather_sequence(comm::Communicator& sp, const torch::Tensor& x);

// Head-sharded → sequence-sharded, the inverse: [B, S, h/P, D] → [B, S/P, h, D]. Requires S % P == 0.
torch::Tensor scatter_sequence_gather_heads(comm::Communicator& sp, const torch::Tensor& x);

// Hkv < P: each kv head repeated P / Hkv times, so that every rank receives the kv head its query heads
// use: [B, S/P, Hkv, D] → [B, S/P, P, D]. Identity when Hkv >= P.
torch::Tensor replicate_kv_heads_for_sp(const torch::Tensor& kv, std::int64_t sp);

}  // namespace ulysses::model

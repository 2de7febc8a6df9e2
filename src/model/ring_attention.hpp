// Ring attention across the ring group of an SP group (--sp-ring R): exact causal attention over packed documents
// when each rank holds one block of the sequence for its heads.
//
// After the Ulysses all-to-all inside its Ulysses group, ring rank r holds its block — chunks r and 2R−1−r of the
// sequence's 2R chunks (core/sequence_parallel.hpp: ring_block) — of q, k and v for its heads. R steps: at step t it
// holds the k/v block of ring rank (r − t) mod R, attends its queries to it, and passes it on to rank r + 1
// (send_recv: the send and the receive are one call, so the ring cannot deadlock). Each (query chunk, key chunk) pair
// is a list of pieces, one per document that has queries in the one and keys in the other (attention_pieces.hpp); a
// piece is whole (keys before queries), causal (the same chunk) or, with a sliding window, masked — pieces wholly
// outside the window or after the queries are skipped. The pieces' outputs merge by their log-sum-exp (online softmax), in fp32.
//
// Backward (one autograd node for the whole ring) passes the k/v blocks round again, each block's gradient travelling
// one step behind it and summing every rank's share, and one more step brings every block's gradient home. Every
// piece's backward uses the final output and log-sum-exp, which makes its dq, dk, dv exactly its share of the whole
// attention's. Each exchange is begun before the pieces it overlaps and finished after them
// (Communicator::start_send_recv: the next block forward; the next block and the previous block's gradient backward).
//
// Kernels per piece: attention_pieces.hpp (flash for CPU, FlashAttention-2 on a GPU in bf16/fp16, else written out).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "comm/communicator.hpp"
#include "core/sequence_parallel.hpp"
#include "model/attention_pieces.hpp"
#include "model/document_attention.hpp"

namespace ulysses::model {

// Where this rank sits in the ring and the sequence's length.
struct RingPosition {
  std::int64_t seq_len = 0;
  std::int64_t rank = 0, degree = 1;   // ring rank r, ring degree R
};

// q [B, 2C, h, D], k, v [B, 2C, hkv, D] (h % hkv == 0; query head i uses kv head i / (h / hkv)): this rank's ring
// block, chunk r's C tokens then chunk 2R−1−r's → [B, 2C, h, D], q's dtype. `ring` is the ring group's communicator
// (size R, rank r; not owned, must outlive backward); plan: the whole sequence's documents (plan.window).
torch::Tensor ring_attention(comm::Communicator& ring, const RingPosition& where, const torch::Tensor& q,
                             const torch::Tensor& k, const torch::Tensor& v, const AttentionPlan& plan, double scale,
                             PieceKernel kernel = PieceKernel::kAuto);

// Which kernel computes the pieces for q of this device, dtype and head size, as one line for the start-up log, e.g.
// "PyTorch's flash attention for CPU".
std::string piece_kernel(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim);

}  // namespace ulysses::model

// Attention in pieces with their log-sum-exp: the kernels ring attention (ring_attention.hpp) and the head groups'
// backward from a kept output (attention.hpp) share.
//
// A piece is one rectangle of causal attention over packed documents: queries [q.begin, q.end) of one document in one
// batch row against keys [k.begin, k.end) of the same document — whole (the keys come first), causal (the same tokens
// on both sides) or, with a sliding window, masked. Its forward returns its output and the log-sum-exp of each query's
// scores (lse); its backward takes the output and lse of the whole attention its queries belong to, which makes its
// dq, dk, dv exactly its share of that attention's gradients (pieces that split a query's keys merge by their lse).
//
// Kernels per piece: on CPU PyTorch's flash attention for CPU (forward with the lse, backward from it; grouped KV heads
// native, as SDPA calls it); on a GPU in bf16/fp16 FlashAttention-2 (PyTorch's _flash_attention_forward/backward:
// grouped KV heads native, the window as its left/right sizes; dq, dk, dv in that dtype); elsewhere (fp32 on a GPU,
// or a GPU or head size flash has no kernel for: flash_applies) the same arithmetic written out (one piece's scores
// held whole: [h, Lq, Lk]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "core/sequence_parallel.hpp"
#include "model/document_attention.hpp"

namespace ulysses::model {

// One rectangle in batch row `row`: queries [q.begin, q.end) against keys [k.begin, k.end) (positions in the whole
// sequence). causal: the same tokens on both sides, key ≤ query; masked: a sliding window cuts the rectangle
// (key > query − window), with causal too where the sides are the same tokens.
struct AttentionPiece {
  std::int64_t row = 0;
  TokenRange q, k;
  bool causal = false, masked = false;
};

// The pieces of query chunk q_chunk against key chunk k_chunk (equal or disjoint ranges of the sequence), for the
// documents of `plan` (its runs, over the whole sequence) and an optional sliding window. Every piece has at least
// one allowed key for each of its queries. With both chunks the whole sequence: one causal piece per document.
std::vector<AttentionPiece> attention_pieces(const AttentionPlan& plan, TokenRange q_chunk, TokenRange k_chunk,
                                             std::optional<std::int64_t> window);

// A masked piece's sliding window as FlashAttention takes it (window_size_left/right, its mask aligned to the bottom
// right): key j of the piece's Lk is allowed for query i of its Lq when i + Lk − Lq − left ≤ j ≤ i + Lk − Lq + right
// — the same keys as key ≤ query and query − key < window. Both sizes ≥ 0 for every piece attention_pieces makes.
struct PieceWindow {
  std::int64_t left = 0, right = 0;
};
PieceWindow piece_window(const AttentionPiece& p, std::int64_t window);

// Which kernel computes each piece: kAuto, the flash kernel of the device and dtype where there is one, the arithmetic
// written out elsewhere; kWrittenOut, the arithmetic written out everywhere (the tests check it on a CPU against the
// flash kernel).
enum class PieceKernel { kAuto, kWrittenOut };

// The kernel PieceKernel resolves to for q of a device, dtype and head size.
enum class Kernel { kFlashCpu, kFlashCuda, kWrittenOut };
Kernel resolve_kernel(PieceKernel asked, const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim);

// The kernel as one line for the start-up log, e.g. "PyTorch's flash attention for CPU".
std::string kernel_name(Kernel k);

// How one piece is computed: its kernel, causal or not, its window (the CUDA kernel's) or mask (the CPU kernels').
struct PieceMath {
  Kernel kernel;
  bool causal;
  std::optional<PieceWindow> window;
  std::optional<torch::Tensor> mask;   // [Lq, Lk] additive
  double scale;
  c10::ScalarType acc;                 // the accumulation dtype: float, or double for double q
};

// The dtype pieces accumulate in for q of `dtype`: double for double, float otherwise.
inline c10::ScalarType accumulation(c10::ScalarType dtype) {
  return dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// The math of piece p of a sequence with an optional sliding window, for q of `q_options`.
PieceMath piece_math(Kernel kernel, const AttentionPiece& p, std::optional<std::int64_t> window, double scale,
                     const torch::TensorOptions& q_options);

// One piece forward: q [1, Lq, h, D], k, v [1, Lk, hkv, D] (h % hkv == 0) → out [1, Lq, h, D] (q's dtype),
// lse [1, h, Lq] (acc)
std::pair<torch::Tensor, torch::Tensor> piece_forward(const PieceMath& m, const torch::Tensor& q,
                                                      const torch::Tensor& k, const torch::Tensor& v);

// One piece backward from the whole attention's out [1, Lq, h, D] and lse [1, h, Lq] → dq [1, Lq, h, D],
// dk, dv [1, Lk, hkv, D] (acc)
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> piece_backward(const PieceMath& m, const torch::Tensor& dout,
                                                                       const torch::Tensor& q, const torch::Tensor& k,
                                                                       const torch::Tensor& v, const torch::Tensor& out,
                                                                       const torch::Tensor& lse);

// Whether a flash kernel computes the pieces of q of this device, dtype and head size (the kept-output backward
// applies only there: written out, a piece of a long document would hold its [h, d, d] scores).
bool flash_pieces(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim);

// Causal attention over the documents of `plan` (and its window), one piece per document, without a graph:
// q [B, S, h, D], k, v [B, S, hkv, D] → out [B, S, h, D] (q's dtype), lse [B, h, S] (float).
std::pair<torch::Tensor, torch::Tensor> attention_with_lse(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const AttentionPlan& plan,
                                                           double scale);

// The same attention as a graph node whose forward already ran: returns `out` (attention_with_lse's, kept) with a
// backward that computes dq, dk, dv by the pieces from out and lse — no attention forward. q, k, v as above.
torch::Tensor attention_from_kept(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& out, const torch::Tensor& lse, const AttentionPlan& plan,
                                  double scale);

}  // namespace ulysses::model

// The 2^31 − 1 element rule: at millions of tokens single tensors pass 2^31 elements, and a kernel that indexes them
// with 32-bit integers reads or writes out of bounds (ALST's one-GPU recipe notes an illegal memory access at 555K
// tokens for Llama-8B, where S × 4096 passes 2^31). This names, per rank and torch-free, the tensors whose size
// grows with the sequence that a single kernel gets whole, so that a run whose flags would pass the limit is refused
// before anything is allocated, with the flag that fixes it (train/trainer.cpp via fit_check, ulysses-plan), and so
// that --attention-head-groups auto takes the least G that keeps them under it (advice.hpp).
//
// Per rank, B the micro-batch, S the sequence, P the SP degree, T = B·S/P, G head groups:
//   q of one head group     [B, S, H/G/P, D] after the all-to-all (the attention kernel's input; its output and the
//                           all-to-all buffers of the group are as large; k and v are no larger)
//   MLP tile                [rows, intermediate]: gate, up and their product (rows: the tile, else T)
//   logits chunk            [rows, vocab] (rows: the chunk, else T)
//   embedding gradient      [vocab, hidden]
//   sliding-window mask     [B, 1, S, S] (Mistral: no fused kernel for a window here)
// Not listed: the residual stream and the layer inputs [T, hidden] and the matmuls over T rows — they pass 2^31 at
// 524,288 tokens per rank for hidden 4096, and meet only kernels that index in 64 bits or split their work into
// 32-bit pieces (TensorIterator's elementwise and reduction kernels, cuBLAS with T rows, the host copies and NCCL,
// whose counts are size_t); our own index arithmetic (pack offsets, loader slices, loss chunks, offload buffers)
// is int64_t throughout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arch/model_config.hpp"
#include "plan/memory_flags.hpp"
#include "plan/memory_model.hpp"

namespace ulysses::plan {

inline constexpr std::int64_t kMaxTensorElements = (std::int64_t{1} << 31) - 1;

struct KernelTensor {
  std::string name;           // "q of one head group after the all-to-all [B, S, H/G/P, D]"
  std::int64_t elements = 0;
  std::string fix;            // the flag that makes it smaller
};

std::vector<KernelTensor> kernel_tensors(const arch::ModelConfig& c, const Layout& l, const Features& f,
                                         std::int64_t seq_len);
// The largest of them past kMaxTensorElements, or nullopt.
std::optional<KernelTensor> past_tensor_limit(const arch::ModelConfig& c, const Layout& l, const Features& f,
                                              std::int64_t seq_len);
// BadInput naming that tensor, its elements, S and the fix.
void check_tensor_limit(const arch::ModelConfig& c, const Layout& l, const Features& f, std::int64_t seq_len);

}  // namespace ulysses::plan

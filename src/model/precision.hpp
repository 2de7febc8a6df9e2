// --precision fp32|bf16|amp-bf16: the dtypes a model computes and keeps its activations in. In every mode the
// trained states — fp32 master weights, their gradients and AdamW's moments — are float32 (train/model_states).
//   fp32       everything float32.
//   bf16       the model in bf16 (DeepSpeed's `bf16: enabled`, Megatron's --bf16, FSDP2's param_dtype=bfloat16,
//              transformers' torch_dtype=bfloat16): every weight it computes with is a bf16 copy of its master
//              (norms, biases, the embedding table and the head too), so the embedding output, the residual stream,
//              each layer's kept or offloaded input and the all-to-all buffers are bf16; RMSNorm, RoPE tables,
//              softmax and the cross-entropy compute inside in fp32 and return bf16, as transformers does.
//   amp-bf16   torch.autocast over the fp32 weights (HF Trainer's bf16=True): matmuls, attention and the
//              all-to-alls run in bf16 (autocast casts the weights per use), while norms, the residual stream and
//              every kept layer input stay float32 — twice bf16's activation bytes.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "plan/precision.hpp"

namespace ulysses::model {

using plan::Precision;   // resolved from the flags once, with the planner's bytes (plan::dtype_plan)

c10::ScalarType compute_dtype(Precision p);               // of the matmuls: Float, or BFloat16 in both bf16 modes
c10::ScalarType weight_dtype(Precision p);                // of every other weight (norms, biases, table): bf16 only
                                                          // for kBf16
inline bool autocasts(Precision p) { return p == Precision::kAmpBf16; }

// Autocast to bf16 on the device's type for this scope under amp-bf16 (nothing otherwise); nests like
// torch.autocast and clears the cast-weight cache when the outermost scope ends.
class AutocastScope {
 public:
  AutocastScope(Precision p, const c10::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::kFloat;
};

}  // namespace ulysses::model

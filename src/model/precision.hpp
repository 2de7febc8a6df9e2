// --precision fp32|bf16. bf16 is mixed precision as in torch.autocast: parameters, gradients and AdamW
// state stay float32 (the master weights); inside the forward, matmuls, attention and the all-to-alls run
// in bfloat16 (autocast casts the weights per use), while norms, the residual stream, softmax statistics,
// the loss and every reduction stay float32. The backward follows the forward's dtypes.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace ulysses::model {

enum class Precision { kFp32, kBf16 };

Precision precision_from_name(const std::string& name);   // BadInput for other names
c10::ScalarType compute_dtype(Precision p);               // Float or BFloat16

// Autocast to bf16 on the device's type for this scope (nothing for fp32); nests like torch.autocast and
// clears the cast-weight cache when the outermost scope ends.
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

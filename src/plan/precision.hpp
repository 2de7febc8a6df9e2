// --precision, --fp32-residual and --reduce-dtype resolved once into the dtype plan that the trainer's model
// (model/precision.hpp: the dtypes it computes and keeps activations in) and the planner's byte counts
// (memory_flags.hpp's Features) both read. Torch-free.
//   fp32       everything float32.
//   bf16       the model in bf16 (DeepSpeed's `bf16: enabled`, Megatron's --bf16): every weight it computes with a
//              bf16 copy of its fp32 master; the residual stream and kept layer inputs bf16 (fp32 with --fp32-residual).
//   amp-bf16   torch.autocast over fp32 weights (HF Trainer's bf16=True): matmuls, attention and the all-to-alls
//              in bf16; norms, the residual stream and kept inputs fp32.
// The trained states (masters, their gradients, AdamW's moments) are fp32 in every mode.
#pragma once

#include <string>

namespace ulysses::plan {

enum class Precision { kFp32, kBf16, kAmpBf16 };

// "fp32", "bf16", "amp-bf16" (auto settled before: memory_flags.hpp's settle_precision); BadInput for others.
Precision precision_from_name(const std::string& name);

struct DtypePlan {
  Precision precision = Precision::kFp32;
  bool matmuls_bf16 = false;    // bf16 or amp-bf16: the matmuls' operands (and a matrix's gathered copy) bf16
  bool model_bf16 = false;      // bf16: every weight copy, activation and kept layer input bf16
  bool fp32_residual = false;   // bf16 with the residual stream and kept inputs fp32
  bool reduce_bf16 = false;     // gradients summed over ranks in bf16
};

// BadInput: an unknown precision or reduce dtype, --fp32-residual without --precision bf16.
DtypePlan dtype_plan(const std::string& precision, bool fp32_residual, const std::string& reduce_dtype);

}  // namespace ulysses::plan

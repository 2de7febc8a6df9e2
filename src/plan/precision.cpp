#include "plan/precision.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::plan {

Precision precision_from_name(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "amp-bf16") return Precision::kAmpBf16;
  throw BadInput(fmt::format("--precision {}: unknown precision", name), "use fp32, bf16 or amp-bf16");
}

DtypePlan dtype_plan(const std::string& precision, bool fp32_residual, const std::string& reduce_dtype) {
  DtypePlan d;
  d.precision = precision_from_name(precision);
  d.matmuls_bf16 = d.precision != Precision::kFp32;
  d.model_bf16 = d.precision == Precision::kBf16;
  if (fp32_residual && !d.model_bf16)
    throw BadInput(fmt::format("--fp32-residual keeps the residual stream of --precision bf16 in fp32, and --precision "
                               "is {}, whose residual stream is fp32 already", precision),
                   "drop --fp32-residual, or pass --precision bf16");
  d.fp32_residual = fp32_residual;
  if (reduce_dtype != "fp32" && reduce_dtype != "bf16")
    throw BadInput(fmt::format("--reduce-dtype {}: unknown dtype", reduce_dtype), "use fp32 or bf16");
  d.reduce_bf16 = reduce_dtype == "bf16";
  return d;
}

}  // namespace ulysses::plan

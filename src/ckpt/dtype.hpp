// Floating-point conversions between the safetensors dtypes a model is stored in (F32, BF16, F16),
// torch-free and bit-exact with PyTorch's casts:
//   fp32 → bf16: round to nearest, ties to even; NaN stays NaN (quiet), ±inf stays ±inf.
//   fp32 → fp16: IEEE 754 binary16, round to nearest even, subnormals kept, |x| ≥ 65520 → ±inf.
//   bf16/fp16 → fp32: exact.
// The loops are plain and branch-free so that the compiler vectorizes them (export_bench measures it).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/safetensors.hpp"

namespace ulysses::ckpt {

inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(nan ? ((x >> 16) | 0x40u) : rounded);
}

inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

std::uint16_t f32_to_f16(float f);
float f16_to_f32(std::uint16_t h);

// The floating dtypes a model tensor may have (F32, BF16, F16).
bool is_model_float(st::DType d);

// n elements of `from` at src → n elements of `to` at dst (both model floats; from == to copies).
void convert(const void* src, st::DType from, void* dst, st::DType to, std::size_t n);

// How many of the n model floats at src are NaN or ±inf (exponent bits all ones).
std::uint64_t nonfinite_count(const void* src, st::DType d, std::size_t n);

// "bf16" | "fp16" | "fp32" → the dtype, and the torch_dtype name transformers writes for it.
st::DType dtype_from_flag(const std::string& flag);
const char* torch_dtype_name(st::DType d);   // "bfloat16", "float16", "float32"

}  // namespace ulysses::ckpt

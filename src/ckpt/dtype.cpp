#include "ckpt/dtype.hpp"

#include <cstring>

#include "core/error.hpp"

namespace ulysses::ckpt {

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));   // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);   // ≥ 65520 (or inf) → inf
  if (a >= 0x38800000u) {   // normal in fp16 (≥ 2^-14): rebias the exponent (-112) and round the 13 dropped bits
    a += 0xc8000fffu + ((a >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (a >> 13));
  }
  // subnormal or zero: adding 0.5 (whose ulp is 2^-24, the fp16 subnormal step) rounds in the FPU, to nearest even
  const float r = std::bit_cast<float>(a) + 0.5f;
  return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(r) - std::bit_cast<std::uint32_t>(0.5f)));
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {   // zero or subnormal: mant × 2^-24 exactly
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(v));
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

std::uint64_t nonfinite_count(const void* src, st::DType d, std::size_t n) {
  const auto count = [&]<typename Bits>(Bits exponent) {
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Bits b;
      std::memcpy(&b, static_cast<const char*>(src) + i * sizeof(Bits), sizeof(Bits));
      bad += (b & exponent) == exponent;
    }
    return bad;
  };
  switch (d) {
    case st::DType::kF32: return count(std::uint32_t{0x7f800000u});
    case st::DType::kBF16: return count(std::uint16_t{0x7f80u});
    case st::DType::kF16: return count(std::uint16_t{0x7c00u});
    default: return 0;   // not a model float: no NaN to have
  }
}

bool is_model_float(st::DType d) { return d == st::DType::kF32 || d == st::DType::kBF16 || d == st::DType::kF16; }

void convert(const void* src, st::DType from, void* dst, st::DType to, std::size_t n) {
  ULY_CHECK(is_model_float(from) && is_model_float(to), "convert {} -> {}", st::dtype_name(from), st::dtype_name(to));
  if (from == to) {
    std::memcpy(dst, src, n * st::itemsize(from));
    return;
  }
  if (from == st::DType::kF32) {
    const auto* s = static_cast<const float*>(src);
    auto* d = static_cast<std::uint16_t*>(dst);
    if (to == st::DType::kBF16)
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    else
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_f16(s[i]);
    return;
  }
  const auto* s = static_cast<const std::uint16_t*>(src);
  if (to == st::DType::kF32) {
    auto* d = static_cast<float*>(dst);
    if (from == st::DType::kBF16)
      for (std::size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    else
      for (std::size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    return;
  }
  // bf16 <-> fp16: through fp32 (exact), then one rounding
  auto* d = static_cast<std::uint16_t*>(dst);
  for (std::size_t i = 0; i < n; ++i)
    d[i] = from == st::DType::kBF16 ? f32_to_f16(bf16_to_f32(s[i])) : f32_to_bf16(f16_to_f32(s[i]));
}

st::DType dtype_from_flag(const std::string& flag) {
  if (flag == "bf16") return st::DType::kBF16;
  if (flag == "fp16") return st::DType::kF16;
  if (flag == "fp32") return st::DType::kF32;
  throw BadInput(fmt::format("--dtype {} is not supported", flag), "use bf16, fp16 or fp32");
}

const char* torch_dtype_name(st::DType d) {
  switch (d) {
    case st::DType::kBF16: return "bfloat16";
    case st::DType::kF16: return "float16";
    default: return "float32";
  }
}

}  // namespace ulysses::ckpt

// Visible tensor values for the safetensors tests, shared by the GoogleTest executables and the
// crosscheck helper (crosscheck.py computes the same values with torch).
//
// Element k of a test tensor with salt s (the salt keeps tensors distinct, so a swapped or shifted tensor
// shows): BOOL (k+s) % 3 == 0; U8 (k+s) % 251; I8..I64 (k+s) % 101 - 50; F64/F32/F16/BF16 the same
// integer / 2, exact in every float type.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "io/safetensors.hpp"

namespace st_test {

using ulysses::st::DType;

inline std::uint16_t bf16_bits(float f) { return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16); }

// Exact for zero and for normal values representable in binary16 (all test values are).
inline std::uint16_t f16_bits(float f) {
  const auto b = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (b >> 16) & 0x8000u, exp = (b >> 23) & 0xffu, mantissa = b & 0x7fffffu;
  if (exp == 0) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | ((exp - 127 + 15) << 10) | (mantissa >> 13));
}

template <class T>
void put(std::vector<std::uint8_t>& out, T v) {
  const auto at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

inline std::vector<std::uint8_t> test_bytes(DType d, std::uint64_t numel, std::uint64_t salt) {
  std::vector<std::uint8_t> out;
  for (std::uint64_t k = 0; k < numel; ++k) {
    const std::uint64_t m = k + salt;
    const auto i = static_cast<std::int64_t>(m % 101) - 50;
    const float f = static_cast<float>(i) / 2;
    switch (d) {
      case DType::kF64: put(out, static_cast<double>(f)); break;
      case DType::kF32: put(out, f); break;
      case DType::kF16: put(out, f16_bits(f)); break;
      case DType::kBF16: put(out, bf16_bits(f)); break;
      case DType::kI64: put(out, i); break;
      case DType::kI32: put(out, static_cast<std::int32_t>(i)); break;
      case DType::kI16: put(out, static_cast<std::int16_t>(i)); break;
      case DType::kI8: put(out, static_cast<std::int8_t>(i)); break;
      case DType::kU8: put(out, static_cast<std::uint8_t>(m % 251)); break;
      case DType::kBool: put(out, static_cast<std::uint8_t>(m % 3 == 0)); break;
    }
  }
  return out;
}

inline std::uint64_t numel(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

}  // namespace st_test

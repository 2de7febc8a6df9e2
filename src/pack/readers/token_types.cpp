#include "pack/readers/token_types.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.hpp"

namespace ulysses::pack {
namespace {

constexpr std::int64_t kInt32Bound = std::int64_t{1} << 31;

// The check and search loops below run over every input token. Builds target baseline x86-64 (SSE2),
// which has no 32-bit unsigned min/max, so on x86-64 these loops are also compiled for AVX2 and the
// CPU picks the clone when the program loads (an ifunc): the checks then run at memory speed. Clang (the fuzz and
// sanitizer builds) does not multiversion function templates: it compiles the baseline loops only.
#if defined(__x86_64__) && !defined(__clang__)
#define ULY_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ULY_VECTOR_CLONES
#endif

// Calls f(T{}) with the C++ type of t.
template <class F>
decltype(auto) visit(TokenType t, F&& f) {
  switch (t) {
    case TokenType::kU8: return f(std::uint8_t{});
    case TokenType::kI8: return f(std::int8_t{});
    case TokenType::kI16: return f(std::int16_t{});
    case TokenType::kU16: return f(std::uint16_t{});
    case TokenType::kI32: return f(std::int32_t{});
    case TokenType::kU32: return f(std::uint32_t{});
    case TokenType::kI64: return f(std::int64_t{});
    case TokenType::kF32: return f(float{});
    case TokenType::kF64: return f(double{});
  }
  check_failed(__FILE__, __LINE__, "known TokenType", fmt::format("code {}", static_cast<int>(t)));
}

template <class T>
T load(const std::byte* src, std::size_t i) {
  T v;
  std::memcpy(&v, src + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
ULY_VECTOR_CLONES std::size_t check_integers(const std::byte* src, std::size_t n, std::int64_t limit,
                                             std::int64_t& max_id) {
  T lo = std::numeric_limits<T>::max();
  T hi = std::numeric_limits<T>::lowest();
  for (std::size_t i = 0; i < n; ++i) {
    const T v = load<T>(src, i);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (n == 0) return 0;
  if (static_cast<std::int64_t>(lo) >= 0 && static_cast<std::int64_t>(hi) < limit) {
    max_id = std::max(max_id, static_cast<std::int64_t>(hi));
    return n;
  }
  std::size_t i = 0;
  while (static_cast<std::int64_t>(load<T>(src, i)) >= 0 &&
         static_cast<std::int64_t>(load<T>(src, i)) < limit) {
    ++i;
  }
  return i;
}

// Appends the index of every token equal to target. Tokens are compared a group at a time (a counting
// loop the compiler vectorises); only groups holding a match are searched one by one.
template <class T>
ULY_VECTOR_CLONES void find_equal(const std::byte* src, std::size_t n, T target, std::vector<std::size_t>& hits) {
  constexpr std::size_t kGroup = 256 / sizeof(T);
  std::size_t group = 0;
  for (; group + kGroup <= n; group += kGroup) {
    unsigned matches = 0;
    for (std::size_t i = group; i < group + kGroup; ++i) matches += load<T>(src, i) == target ? 1u : 0u;
    if (matches == 0) continue;
    for (std::size_t i = group; i < group + kGroup; ++i)
      if (load<T>(src, i) == target) hits.push_back(i);
  }
  for (std::size_t i = group; i < n; ++i)
    if (load<T>(src, i) == target) hits.push_back(i);
}

template <class T>
std::size_t check_floats(const std::byte* src, std::size_t n, std::int64_t limit,
                         std::int64_t& max_id) {
  double hi = -1;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = load<T>(src, i);
    if (!(v >= 0 && v < static_cast<double>(limit) && v == std::floor(v))) return i;   // NaN fails too
    hi = std::max(hi, v);
  }
  max_id = std::max(max_id, static_cast<std::int64_t>(hi));
  return n;
}

}  // namespace

std::size_t token_bytes(TokenType t) {
  return visit(t, [](auto v) { return sizeof(v); });
}

const char* token_type_name(TokenType t) {
  switch (t) {
    case TokenType::kU8: return "uint8";
    case TokenType::kI8: return "int8";
    case TokenType::kI16: return "int16";
    case TokenType::kU16: return "uint16";
    case TokenType::kI32: return "int32";
    case TokenType::kU32: return "uint32";
    case TokenType::kI64: return "int64";
    case TokenType::kF32: return "float32";
    case TokenType::kF64: return "float64";
  }
  return "unknown";
}

std::int64_t token_type_max(TokenType t) {
  return visit(t, [](auto v) {
    using T = decltype(v);
    constexpr double kMax = static_cast<double>(std::numeric_limits<T>::max());
    if constexpr (kMax >= 0x1p63) return std::numeric_limits<std::int64_t>::max();
    else return static_cast<std::int64_t>(kMax);
  });
}

std::int64_t id_limit(std::int64_t vocab_size) {
  return vocab_size > 0 ? std::min(vocab_size, kInt32Bound) : kInt32Bound;
}

std::size_t check_tokens(TokenType t, const std::byte* src, std::size_t n, std::int64_t limit,
                         std::int64_t& max_id) {
  return visit(t, [&](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) return check_floats<T>(src, n, limit, max_id);
    else return check_integers<T>(src, n, limit, max_id);
  });
}

std::string describe_bad_token(TokenType t, const std::byte* src, std::int64_t vocab_size) {
  return visit(t, [&](auto tag) -> std::string {
    using T = decltype(tag);
    const T v = load<T>(src, 0);
    if constexpr (std::is_floating_point_v<T>) {
      if (!(v == std::floor(v))) return fmt::format("token id {} is not an integer", v);
    }
    if constexpr (std::is_signed_v<T>) {
      if (v < 0) return fmt::format("token id {} is negative", v);
    }
    if (static_cast<double>(v) >= static_cast<double>(kInt32Bound)) {
      return fmt::format("token id {} does not fit int32", v);
    }
    return fmt::format("token id {} is >= the vocabulary size {}", v, vocab_size);
  });
}

void convert_tokens(TokenType t, const std::byte* src, std::size_t n, std::int32_t* dst) {
  visit(t, [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::int32_t>(load<T>(src, i));
  });
}

void find_token(TokenType t, const std::byte* src, std::size_t n, std::int64_t id,
                std::vector<std::size_t>& hits) {
  visit(t, [&](auto tag) {
    using T = decltype(tag);
    if (id < 0 || id > token_type_max(t)) return;
    find_equal<T>(src, n, static_cast<T>(id), hits);
  });
}

}  // namespace ulysses::pack

#include "core/shuffle.hpp"

#include <utility>

namespace ulysses {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a constant, output mixed.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound > 0: Lemire's multiply-shift with rejection (unbiased).
  std::uint64_t below(std::uint64_t bound) {
    __extension__ using U128 = unsigned __int128;
    U128 m = U128{next()} * bound;
    if (static_cast<std::uint64_t>(m) < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;   // 2^64 mod bound
      while (static_cast<std::uint64_t>(m) < threshold) m = U128{next()} * bound;
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

std::vector<std::uint64_t> shuffled_order(std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> order(n);
  for (std::uint64_t i = 0; i < n; ++i) order[i] = i;
  SplitMix64 rng(seed);
  for (std::uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

}  // namespace ulysses

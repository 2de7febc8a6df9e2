// A seeded permutation of [0, n): Fisher-Yates over splitmix64 with an unbiased bounded draw, written out
// so that the order is the same with every compiler and standard library (std::shuffle is not). Used for
// the global sequence shuffle of ulysses-pack and the per-epoch order of the trainer's data loader.
#pragma once

#include <cstdint>
#include <vector>

namespace ulysses {

std::vector<std::uint64_t> shuffled_order(std::uint64_t n, std::uint64_t seed);

}  // namespace ulysses

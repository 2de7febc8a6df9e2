// shuffled_order: a permutation, fixed by its seed on every platform (pinned values), and uniform.
#include <algorithm>
#include <array>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

#include "core/shuffle.hpp"

namespace ulysses {
namespace {

TEST(ShuffledOrder, IsAPermutation) {
  for (const std::uint64_t n : {0, 1, 2, 3, 10, 1000, 100003}) {
    std::vector<std::uint64_t> order = shuffled_order(n, n + 1);
    ASSERT_EQ(order.size(), n);
    std::sort(order.begin(), order.end());
    std::vector<std::uint64_t> identity(n);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(order, identity) << "n " << n;
  }
}

TEST(ShuffledOrder, IsFixedByItsSeed) {
  EXPECT_EQ(shuffled_order(1000, 7), shuffled_order(1000, 7));
  EXPECT_NE(shuffled_order(1000, 7), shuffled_order(1000, 8));
  EXPECT_NE(shuffled_order(1000, 0), shuffled_order(1000, 1));
}

// Pins splitmix64, the bounded draw and the Fisher-Yates loop: a change here reorders every dataset.
// Cross-checked with an independent Python implementation (whose splitmix64 reproduces Vigna's
// published outputs for seed 1234567).
TEST(ShuffledOrder, PinnedValuesForSeed42) {
  EXPECT_EQ(shuffled_order(10, 42), (std::vector<std::uint64_t>{8, 3, 6, 5, 4, 0, 9, 2, 1, 7}));
}

TEST(ShuffledOrder, AllPermutationsOfThreeAreEquallyLikely) {
  std::map<std::vector<std::uint64_t>, int> counts;
  constexpr int kSeeds = 60000;
  for (int seed = 0; seed < kSeeds; ++seed) ++counts[shuffled_order(3, seed)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) EXPECT_NEAR(count, kSeeds / 6, 500);   // ~5.5 sigma
}

}  // namespace
}  // namespace ulysses

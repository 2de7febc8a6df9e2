// RankLayout against hand-made tables (no MPI): SP is the fastest axis.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/rank_layout.hpp"

using ulysses::RankLayout;

TEST(RankLayout, WorldEightSpFourByHand) {
  RankLayout l(8, 4);
  EXPECT_EQ(l.dp(), 2);
  // global:        0  1  2  3  4  5  6  7
  int sp_rank[] = {0, 1, 2, 3, 0, 1, 2, 3};
  int dp_rank[] = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(l.sp_rank(g), sp_rank[g]) << g;
    EXPECT_EQ(l.dp_rank(g), dp_rank[g]) << g;
    EXPECT_EQ(l.global_rank(sp_rank[g], dp_rank[g]), g);
  }
  EXPECT_EQ(l.sp_group_of(6), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(l.dp_group_of(6), (std::vector<int>{2, 6}));
}

TEST(RankLayout, WorldSixSpTwoByHand) {
  RankLayout l(6, 2);
  EXPECT_EQ(l.sp_group_of(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(l.dp_group_of(3), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(l.dp_group_of(0), (std::vector<int>{0, 2, 4}));
}

TEST(RankLayout, EveryRankInExactlyOneGroupOfEachKind) {
  for (int world : {1, 2, 4, 8, 12, 64, 96}) {
    for (int sp = 1; sp <= world; ++sp) {
      if (world % sp) continue;
      RankLayout l(world, sp);
      std::vector<int> seen_sp(world, 0), seen_dp(world, 0);
      for (int d = 0; d < l.dp(); ++d)
        for (int g : l.sp_group_of(l.global_rank(0, d))) ++seen_sp[g];
      for (int r = 0; r < sp; ++r)
        for (int g : l.dp_group_of(l.global_rank(r, 0))) ++seen_dp[g];
      for (int g = 0; g < world; ++g) {
        EXPECT_EQ(seen_sp[g], 1);
        EXPECT_EQ(seen_dp[g], 1);
      }
    }
  }
}

TEST(RankLayout, RefusesSpNotDividingWorld) {
  try {
    RankLayout l(6, 4);
    FAIL() << "expected BadInput";
  } catch (const ulysses::BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("(6)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(4)"), std::string::npos);
  }
}

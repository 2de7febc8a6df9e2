#include "core/rank_layout.hpp"

#include "core/error.hpp"

namespace ulysses {

void check_ring_degree(std::int64_t sp, std::int64_t ring) {
  if (ring < 1 || sp < 1 || sp % ring != 0)
    throw BadInput(fmt::format("--sp-ring ({}) must be a positive divisor of --sp ({})", ring, sp),
                   "--sp is the Ulysses degree × the ring degree: e.g. --sp 32 --sp-ring 4 (Ulysses 8 × ring 4)");
}

RankLayout::RankLayout(int world, int sp, int ring) : world_(world), sp_(sp), ring_(ring) {
  if (world < 1 || sp < 1)
    throw BadInput(fmt::format("world size ({}) and --sp ({}) must be positive", world, sp),
                   "launch one rank or more and pass --sp 1 or more");
  if (world % sp != 0)
    throw BadInput(fmt::format("world size ({}) is not divisible by --sp ({})", world, sp),
                   fmt::format("launch a multiple of {} ranks, or choose --sp among the divisors of {}", sp, world));
  check_ring_degree(sp, ring);
}

void RankLayout::check_rank(int g) const {
  ULY_CHECK(g >= 0 && g < world_, "rank {} outside world of {}", g, world_);
}

int RankLayout::sp_rank(int g) const {
  check_rank(g);
  return g % sp_;
}

int RankLayout::dp_rank(int g) const {
  check_rank(g);
  return g / sp_;
}

int RankLayout::global_rank(int sp_rank, int dp_rank) const {
  ULY_CHECK(sp_rank >= 0 && sp_rank < sp_ && dp_rank >= 0 && dp_rank < dp(),
            "sp_rank {} / dp_rank {} outside layout sp={} dp={}", sp_rank, dp_rank, sp_, dp());
  return sp_rank + sp_ * dp_rank;
}

int RankLayout::ulysses_rank(int g) const { return sp_rank(g) % ulysses(); }

int RankLayout::ring_rank(int g) const { return sp_rank(g) / ulysses(); }

std::vector<int> RankLayout::ulysses_group_of(int g) const {
  std::vector<int> ranks;
  for (int u = 0; u < ulysses(); ++u) ranks.push_back(global_rank(u + ulysses() * ring_rank(g), dp_rank(g)));
  return ranks;
}

std::vector<int> RankLayout::ring_group_of(int g) const {
  std::vector<int> ranks;
  for (int r = 0; r < ring_; ++r) ranks.push_back(global_rank(ulysses_rank(g) + ulysses() * r, dp_rank(g)));
  return ranks;
}

std::vector<int> RankLayout::sp_group_of(int g) const {
  std::vector<int> ranks;
  for (int r = 0; r < sp_; ++r) ranks.push_back(global_rank(r, dp_rank(g)));
  return ranks;
}

std::vector<int> RankLayout::dp_group_of(int g) const {
  std::vector<int> ranks;
  for (int d = 0; d < dp(); ++d) ranks.push_back(global_rank(sp_rank(g), d));
  return ranks;
}

}  // namespace ulysses

// RankLayout: the one owner of rank arithmetic. Pure integers, no MPI.
//
// World = SP × DP, SP fastest: global_rank = sp_rank + sp * dp_rank. An SP group is a block of `sp`
// consecutive global ranks (one node or NVLink island when ranks are placed in order); a DP group
// holds the ranks with the same sp_rank. Nobody else computes rank / sp.
//
// Inside an SP group, SP = U × R (--sp-ring R, Ulysses degree U = sp / R), Ulysses fastest:
// sp_rank = ulysses_rank + U * ring_rank. A Ulysses group is U consecutive ranks (one island: its all-to-alls);
// a ring group holds the SP group's ranks with the same ulysses_rank (the ring of K/V blocks across islands).
// R = 1 is plain Ulysses: the Ulysses group is the SP group and each ring group one rank.
#pragma once

#include <cstdint>
#include <vector>

namespace ulysses {

// BadInput unless `ring` (--sp-ring) is a positive divisor of `sp` (--sp): RankLayout's check, and ulysses-pack's.
void check_ring_degree(std::int64_t sp, std::int64_t ring);

class RankLayout {
 public:
  // throws BadInput when sp does not divide world or ring does not divide sp
  RankLayout(int world, int sp, int ring = 1);

  int world() const { return world_; }
  int sp() const { return sp_; }
  int dp() const { return world_ / sp_; }
  int ring() const { return ring_; }             // R
  int ulysses() const { return sp_ / ring_; }    // U

  int sp_rank(int global_rank) const;
  int dp_rank(int global_rank) const;
  int global_rank(int sp_rank, int dp_rank) const;
  int ulysses_rank(int global_rank) const;       // 0 ≤ · < U
  int ring_rank(int global_rank) const;          // 0 ≤ · < R

  std::vector<int> sp_group_of(int global_rank) const;   // the sp ranks sharing its dp_rank, in sp order
  std::vector<int> dp_group_of(int global_rank) const;   // the dp ranks sharing its sp_rank, in dp order
  std::vector<int> ulysses_group_of(int global_rank) const;   // its SP group's ranks sharing its ring_rank
  std::vector<int> ring_group_of(int global_rank) const;      // its SP group's ranks sharing its ulysses_rank

 private:
  void check_rank(int global_rank) const;
  int world_, sp_, ring_;
};

}  // namespace ulysses

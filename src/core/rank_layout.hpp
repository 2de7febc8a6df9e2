// RankLayout: the one owner of rank arithmetic. Pure integers, no MPI.
//
// World = SP × DP, SP fastest: global_rank = sp_rank + sp * dp_rank. An SP group is a block of `sp`
// consecutive global ranks (one node or NVLink island when ranks are placed in order); a DP group
// holds the ranks with the same sp_rank. Nobody else computes rank / sp.
#pragma once

#include <vector>

namespace ulysses {

class RankLayout {
 public:
  RankLayout(int world, int sp);   // throws BadInput when sp does not divide world

  int world() const { return world_; }
  int sp() const { return sp_; }
  int dp() const { return world_ / sp_; }

  int sp_rank(int global_rank) const;
  int dp_rank(int global_rank) const;
  int global_rank(int sp_rank, int dp_rank) const;

  std::vector<int> sp_group_of(int global_rank) const;   // the sp ranks sharing its dp_rank, in sp order
  std::vector<int> dp_group_of(int global_rank) const;   // the dp ranks sharing its sp_rank, in dp order

 private:
  void check_rank(int global_rank) const;
  int world_, sp_;
};

}  // namespace ulysses

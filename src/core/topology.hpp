// Topology: where each global rank runs (node, local rank, GPU, NVLink island), and whether a RankLayout's
// SP groups stay inside one island. Pure arithmetic: no MPI, no torch; the trainer gathers one RankSelf per
// rank (from SLURM_* / MPI environment variables and the host name) and hands the table to Topology.
//
// Vocabulary (docs/cluster-guide.md):
//   node        a machine; ranks on it share NVLink (HGX) and its NICs
//   local rank  index of the rank on its node = the GPU it drives (one task per GPU)
//   island      the ranks that share one NVLink domain: a node (island_size 0), or island_size ranks made of
//               consecutive job nodes (GB200 NVL72: 72 ranks = 18 nodes × 4 GPUs, placed by sbatch --segment)
// The Ulysses all-to-alls move the most bytes, so an SP group must sit inside one island; DP crosses islands.
// RankLayout stays the one owner of the SP/DP arithmetic; this file only asks it for the groups.
#pragma once

#include <string>
#include <vector>

#include "core/rank_layout.hpp"

namespace ulysses {

// What one rank knows about itself before the ranks compare notes. -1: unknown.
struct RankSelf {
  std::string host;     // SLURMD_NODENAME (distinct for emulated nodes on one machine), else the host name
  int node = -1;        // SLURM_NODEID
  int local_rank = -1;  // SLURM_LOCALID, MPI_LOCALRANKID (MPICH), OMPI_COMM_WORLD_LOCAL_RANK
};

// Reads this process's environment (the variables above); `host_name` is used when SLURMD_NODENAME is unset.
RankSelf rank_self_from_env(const std::string& host_name);

struct RankPlace {
  int node = 0, local_rank = 0, island = 0;
  std::string host;
};

class Topology {
 public:
  // One RankSelf per global rank. Where SLURM_NODEID is unknown on any rank, nodes are numbered by host
  // name in order of first appearance; where a local rank is unknown, it is the rank's index among the
  // earlier ranks of its node. island_size (ranks) 0 means one island per node; otherwise it must be a
  // multiple of the ranks per node (equal on every node), and island = node / (island_size / ranks per node).
  // Throws BadInput on duplicate (node, local rank) pairs or an island size that does not fit.
  Topology(const std::vector<RankSelf>& ranks, int island_size);

  // Block placement (what srun does by default): rank g on node g / ranks_per_node, host "node<N>".
  static Topology uniform(int world, int ranks_per_node, int island_size);

  int world() const { return static_cast<int>(places_.size()); }
  const RankPlace& place(int global_rank) const;
  int num_nodes() const { return num_nodes_; }
  int num_islands() const { return num_islands_; }
  int ranks_on_node(int node) const;
  int island_ranks() const { return island_ranks_; }   // ranks per island (the last one may hold fewer)

 private:
  std::vector<RankPlace> places_;
  std::vector<int> ranks_per_node_;   // indexed by node id
  int num_nodes_ = 0, num_islands_ = 0, island_ranks_ = 0;
};

// The first SP group that spans more than one island, as its ranks; empty when every group fits.
std::vector<int> sp_group_crossing_islands(const RankLayout& layout, const Topology& topo);

// Throws BadInput naming the offending group, its islands and hosts, with a hint listing the SP degrees
// that fit, unless `allow` (--allow-sp-across-islands). Checks layout.world() == topo.world() first.
void check_sp_within_islands(const RankLayout& layout, const Topology& topo, bool allow);

}  // namespace ulysses

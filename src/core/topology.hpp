// Topology: where each global rank runs (node, local rank, GPU, NVLink island), and whether a RankLayout's
// SP groups stay inside one island. Pure arithmetic: no MPI, no torch; the trainer gathers one RankSelf per
// rank (from SLURM_* / MPI environment variables and the host name) and hands the table to Topology.
//
// Vocabulary (docs/cluster-guide.md):
//   node        a machine; ranks on it share NVLink (HGX) and its NICs
//   local rank  index of the rank on its node = the GPU it drives (one task per GPU): its place among the ranks
//               of its node in global-rank order, from the gathered table. That is what SLURM_LOCALID,
//               MPI_LOCALRANKID and MPI_Comm_split_type(SHARED) give when they are right; the launcher's
//               variables are only a cross-check (under mpiexec inside an allocation every rank inherits
//               SLURM_LOCALID=0 from the batch step)
//   island      the ranks that share one NVLink domain: a node (island_size 0), or island_size ranks made of
//               consecutive job nodes (GB200 NVL72: 72 ranks = 18 nodes × 4 GPUs, placed by sbatch --segment);
//               measured instead where the GPUs report their fabric (measure_islands, core/gpu_fabric.hpp)
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
  int local_rank = -1;  // the launcher's own: kLocalRankVariables, the first one set (a cross-check only)
  int machine = -1;     // the lowest world rank sharing memory with this one (MPI_COMM_TYPE_SHARED): the machine
};

// Where a launcher says a rank's local rank, most specific first: MPICH's hydra and Open MPI's mpiexec set
// their own, srun sets SLURM_LOCALID (which mpiexec's ranks inherit from the allocation, wrongly).
// launch/bind.sh reads the same variables in the same order.
inline constexpr const char* kLocalRankVariables[] = {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};

// Reads this process's environment (the variables above); `host_name` is used when SLURMD_NODENAME is unset.
RankSelf rank_self_from_env(const std::string& host_name);

struct RankPlace {
  int node = 0, local_rank = 0, island = 0;
  std::string host;
};

class Topology {
 public:
  // One RankSelf per global rank. A node is a (machine, host) pair: the machine from MPI (mpiexec's ranks on
  // other machines inherit the batch step's SLURM_NODEID and SLURMD_NODENAME), the host name within it (emulated
  // nodes). Nodes are numbered by SLURM_NODEID where that maps one-to-one onto them, else in order of first
  // appearance; a rank's local rank is its index among the earlier ranks of its node
  // (the launcher's variable, where known, is compared: local_rank_warning). island_size (ranks) 0 means one island per node; otherwise it must be a
  // multiple of the ranks per node (equal on every node), and island = node / (island_size / ranks per node).
  // Throws BadInput on an island size that does not fit.
  Topology(const std::vector<RankSelf>& ranks, int island_size);

  // Block placement (what srun does by default): rank g on node g / ranks_per_node, host "node<N>".
  static Topology uniform(int world, int ranks_per_node, int island_size);

  int world() const { return static_cast<int>(places_.size()); }
  const RankPlace& place(int global_rank) const;
  int num_nodes() const { return num_nodes_; }
  int num_islands() const { return num_islands_; }
  int ranks_on_node(int node) const;
  int island_ranks() const { return island_ranks_; }   // ranks per island (the last one may hold fewer)
  bool islands_measured() const { return islands_measured_; }

  // The islands as the GPUs report them: fabric[g] is rank g's GPU fabric id (gpu_fabric_id), "" when unknown.
  // When every rank knows its id, the ranks with equal ids form one island (numbered by their lowest rank) and
  // replace the islands computed from island_size; nothing changes when no rank knows it, nor when the fabric joins
  // nodes while island_size keeps islands inside one (multi-node NVLink needs NCCL_MNNVL_ENABLE and IMEX, which the
  // launch sets up only with an island size). Returns a line for the log when the measured islands differ from the
  // computed ones or are not used; else "".
  std::string measure_islands(const std::vector<std::string>& fabric);
  // Empty, or one line for the log: the first rank whose launcher variable disagrees with its place on its node.
  const std::string& local_rank_warning() const { return local_rank_warning_; }

 private:
  std::vector<RankPlace> places_;
  std::vector<int> ranks_per_node_;   // indexed by node id
  int num_nodes_ = 0, num_islands_ = 0, island_ranks_ = 0;
  bool islands_measured_ = false;
  bool multi_node_islands_ = false;   // island_size spans several nodes (the launch asked for multi-node NVLink)
  std::string local_rank_warning_;
};

// The first group of all-to-alls — the SP group, or with a ring (--sp-ring) a Ulysses group: the ring may cross
// islands — that spans more than one island, as its ranks; empty when every group fits.
std::vector<int> sp_group_crossing_islands(const RankLayout& layout, const Topology& topo);

// Throws BadInput naming the offending group, its islands and hosts, with a hint listing the SP degrees
// that fit and the least ring degree (a multiple of this one) that keeps this SP's Ulysses groups inside, unless
// `allow` (--allow-sp-across-islands). Checks layout.world() == topo.world() first.
void check_sp_within_islands(const RankLayout& layout, const Topology& topo, bool allow);

}  // namespace ulysses

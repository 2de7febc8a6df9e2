// Topology against tables (no MPI): block placement on 8-GPU HGX nodes and 4-GPU GB200 NVL72 nodes
// (72-GPU islands), 1 to 4096 GPUs, SP degrees that fit inside an island and that do not; placement
// derived from Slurm ids, from MPI local ranks, and from host names alone; islands measured from GPU fabric ids
// (NVML clique ids) agreeing with, overruling, or unknown beside the computed ones.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/topology.hpp"

using ulysses::BadInput;
using ulysses::RankLayout;
using ulysses::RankSelf;
using ulysses::Topology;

namespace {

struct Case {
  int world, gpus_per_node, island_size, sp;
  bool fits;
};

// Every row: `world` GPUs placed in blocks of `gpus_per_node`; islands of `island_size` ranks (0: a node).
const Case kCases[] = {
    // one GPU, one node
    {1, 1, 0, 1, true},
    {1, 8, 0, 1, true},
    // HGX: 8 GPUs per node, the island is the node
    {8, 8, 0, 8, true},
    {8, 8, 0, 4, true},
    {16, 8, 0, 8, true},
    {16, 8, 0, 16, false},
    {32, 8, 0, 8, true},    // the sbatch default: 4 nodes, SP 8, DP 4
    {32, 8, 0, 2, true},
    {32, 8, 0, 32, false},
    {1024, 8, 0, 8, true},
    {4096, 8, 0, 8, true},
    {4096, 8, 0, 4, true},
    {4096, 8, 0, 16, false},
    {4096, 8, 0, 4096, false},
    // HGX with two nodes bought as one NVLink island (--island-size 16)
    {64, 8, 16, 16, true},
    {64, 8, 16, 32, false},
    // GB200 NVL72: 4 GPUs per node, 18 nodes = 72 GPUs per NVLink domain
    {4, 4, 72, 4, true},
    {72, 4, 72, 72, true},
    {72, 4, 72, 8, true},
    {72, 4, 72, 24, true},
    {144, 4, 72, 8, true},   // groups of 2 nodes; 18 nodes per island is even
    {144, 4, 72, 16, false}, // 4-node groups: the group of ranks 64..79 straddles nodes 16..19
    {144, 4, 72, 72, true},
    {144, 4, 72, 144, false},
    {4032, 4, 72, 24, true}, // 56 racks
    {4096, 4, 72, 8, true},  // 1024 nodes: 56 full racks and a partial one
    {4096, 4, 72, 16, false},
    {4096, 4, 72, 32, false},
    // NVL72 nodes without --island-size: an island is one node of 4
    {72, 4, 0, 4, true},
    {72, 4, 0, 8, false},
};

}  // namespace

TEST(Topology, TableOfClusters) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "world " << c.world << ", " << c.gpus_per_node << " GPUs/node, island "
                                    << c.island_size << ", sp " << c.sp);
    Topology t = Topology::uniform(c.world, c.gpus_per_node, c.island_size);
    RankLayout l(c.world, c.sp);
    EXPECT_EQ(ulysses::sp_group_crossing_islands(l, t).empty(), c.fits);
    if (c.fits) {
      EXPECT_NO_THROW(ulysses::check_sp_within_islands(l, t, false));
    } else {
      EXPECT_THROW(ulysses::check_sp_within_islands(l, t, false), BadInput);
      EXPECT_NO_THROW(ulysses::check_sp_within_islands(l, t, true));   // --allow-sp-across-islands
    }
    const int nodes = (c.world + c.gpus_per_node - 1) / c.gpus_per_node;
    EXPECT_EQ(t.num_nodes(), nodes);
    const int per_island = c.island_size > 0 ? c.island_size : c.gpus_per_node;
    EXPECT_EQ(t.num_islands(), (c.world + per_island - 1) / per_island);
    for (int g = 0; g < c.world; ++g) {
      EXPECT_EQ(t.place(g).node, g / c.gpus_per_node);
      EXPECT_EQ(t.place(g).local_rank, g % c.gpus_per_node);
      ASSERT_EQ(t.place(g).island, g / per_island) << g;
    }
  }
}

TEST(Topology, EverySpThatDividesTheIslandFits) {
  for (int world = 1; world <= 4096; world *= 2)
    for (int sp = 1; sp <= world; sp *= 2) {
      const bool fits = sp <= 8;
      EXPECT_EQ(ulysses::sp_group_crossing_islands(RankLayout(world, sp), Topology::uniform(world, std::min(world, 8), 0)).empty(),
                fits) << world << " " << sp;
    }
}

TEST(Topology, TwoNodesOfTwoFromSlurmIds) {
  // two emulated nodes on one machine: same host name, distinct SLURMD_NODENAME and SLURM_NODEID
  std::vector<RankSelf> ranks = {{"n1", 0, 0}, {"n1", 0, 1}, {"n2", 1, 0}, {"n2", 1, 1}};
  Topology t(ranks, 0);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.num_islands(), 2);
  EXPECT_EQ(t.place(3).host, "n2");
  EXPECT_EQ(t.place(3).island, 1);
  EXPECT_EQ(t.ranks_on_node(1), 2);
  EXPECT_NO_THROW(ulysses::check_sp_within_islands(RankLayout(4, 2), t, false));
  try {
    ulysses::check_sp_within_islands(RankLayout(4, 4), t, false);
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    const std::string msg = ulysses::one_line(e);
    for (const char* needle : {"[0 1 2 3]", "--sp 4", "islands 0, 1", "n1, n2", "--sp 1, 2", "--allow-sp-across-islands",
                               "--island-size 72"})
      EXPECT_NE(msg.find(needle), std::string::npos) << needle << " in: " << msg;
  }
  EXPECT_NO_THROW(ulysses::check_sp_within_islands(RankLayout(4, 4), Topology(ranks, 4), false));
  // SP 4 as Ulysses 2 × a ring of 2: the all-to-alls stay inside each node, the ring crosses them
  EXPECT_NO_THROW(ulysses::check_sp_within_islands(RankLayout(4, 4, 2), t, false));
  try {
    ulysses::check_sp_within_islands(RankLayout(4, 4, 1), t, false);
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(ulysses::one_line(e).find("SP group [0 1 2 3] (--sp 4)"), std::string::npos) << ulysses::one_line(e);
    EXPECT_NE(e.hint().find("or --sp 4 --sp-ring 2 (Ulysses inside each island"), std::string::npos) << e.hint();
  }
  // the ring offered is a multiple of the one given (its Ulysses degree divides this one: the heads still split):
  // SP 24 as 12 × 2 on nodes of 8 → ring 6 (Ulysses 4), not ring 3 (Ulysses 8, which 12 heads would not split over)
  try {
    ulysses::check_sp_within_islands(RankLayout(24, 24, 2), Topology::uniform(24, 8, 0), false);
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(e.hint().find("or --sp 24 --sp-ring 6 ("), std::string::npos) << e.hint();
  }
}

TEST(Topology, CyclicPlacementSplitsSpGroups) {
  // srun --distribution=cyclic: consecutive ranks alternate nodes, so SP=2 crosses the network
  std::vector<RankSelf> ranks = {{"a", 0, 0}, {"b", 1, 0}, {"a", 0, 1}, {"b", 1, 1}};
  EXPECT_EQ(ulysses::sp_group_crossing_islands(RankLayout(4, 2), Topology(ranks, 0)), (std::vector<int>{0, 1}));
}

TEST(Topology, FromHostNamesAlone) {
  // mpiexec without Slurm and without local rank variables: node and local rank come from the host names
  std::vector<RankSelf> ranks = {{"a", -1, -1}, {"a", -1, -1}, {"b", -1, -1}, {"b", -1, -1}, {"b", -1, -1}};
  Topology t(ranks, 0);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.place(1).node, 0);
  EXPECT_EQ(t.place(1).local_rank, 1);
  EXPECT_EQ(t.place(4).node, 1);
  EXPECT_EQ(t.place(4).local_rank, 2);
  EXPECT_EQ(t.ranks_on_node(1), 3);
}

TEST(Topology, MpiLocalRanksWithoutSlurm) {
  std::vector<RankSelf> ranks = {{"ws", -1, 0}, {"ws", -1, 1}, {"ws", -1, 2}, {"ws", -1, 3}};
  Topology t(ranks, 0);
  EXPECT_EQ(t.num_nodes(), 1);
  EXPECT_EQ(t.place(3).local_rank, 3);
  EXPECT_NO_THROW(ulysses::check_sp_within_islands(RankLayout(4, 4), t, false));
}

TEST(Topology, RefusesInconsistentPlacements) {
  EXPECT_THROW(Topology::uniform(16, 8, 12), BadInput);                                   // island not whole nodes
  EXPECT_THROW(Topology({{"a", 0, 0}, {"a", 0, 1}, {"b", 1, 0}}, 4), BadInput);           // uneven nodes + islands
  EXPECT_NO_THROW(Topology({{"a", 0, 0}, {"a", 0, 1}, {"b", 1, 0}}, 0));                  // uneven is fine per node
  EXPECT_THROW(Topology::uniform(8, 8, -1), BadInput);
}

TEST(Topology, LocalRankIsThePlaceOnTheNodeNotTheInheritedVariable) {
  // mpiexec inside a Slurm allocation: every rank inherits SLURM_LOCALID=0 from the batch step. The rank table
  // gives each its place on the node (what MPI_Comm_split_type(SHARED) would), and the disagreement is logged.
  Topology t({{"a", 0, 0}, {"a", 0, 0}, {"a", 0, 0}, {"a", 0, 0}}, 0);
  for (int g = 0; g < 4; ++g) EXPECT_EQ(t.place(g).local_rank, g);
  EXPECT_NE(t.local_rank_warning().find("rank 1 is local rank 1"), std::string::npos) << t.local_rank_warning();
  EXPECT_TRUE(Topology({{"a", 0, 0}, {"a", 0, 1}, {"b", 1, 0}}, 0).local_rank_warning().empty());
  EXPECT_TRUE(Topology({{"a", -1, -1}, {"a", -1, -1}}, 0).local_rank_warning().empty());   // nothing to compare
}

// The launcher variables, most specific first — the order launch/bind.sh reads them in (tests/slurm runs
// bind.sh on the same table).
TEST(Topology, LocalRankVariablesTable) {
  struct Row {
    std::vector<std::pair<const char*, const char*>> env;
    int local_rank;
  };
  const std::vector<Row> table = {
      {{}, -1},
      {{{"SLURM_LOCALID", "3"}}, 3},                                                // srun
      {{{"SLURM_LOCALID", "0"}, {"MPI_LOCALRANKID", "2"}}, 2},                     // hydra mpiexec in an allocation
      {{{"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "5"}}, 5},          // Open MPI mpiexec in an allocation
      {{{"MPI_LOCALRANKID", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "7"}}, 1},
  };
  for (const auto& row : table) {
    for (const char* var : ulysses::kLocalRankVariables) unsetenv(var);
    for (const auto& [k, v] : row.env) setenv(k, v, 1);
    EXPECT_EQ(ulysses::rank_self_from_env("h").local_rank, row.local_rank) << row.env.size() << " variables";
  }
  for (const char* var : ulysses::kLocalRankVariables) unsetenv(var);
  setenv("SLURM_LOCALID", "x", 1);
  EXPECT_THROW(ulysses::rank_self_from_env("h"), BadInput);
  unsetenv("SLURM_LOCALID");
}

TEST(Topology, NodesAreMachinesNotTheVariablesMpiexecsRanksInherit) {
  // mpiexec across two machines inside an allocation: every rank inherits the batch step's SLURM_NODEID=0,
  // SLURMD_NODENAME=gpu001 and SLURM_LOCALID=0; MPI_COMM_TYPE_SHARED still tells the machines apart.
  auto inherited = [](int machine) { return RankSelf{"gpu001", 0, 0, machine}; };
  Topology t({inherited(0), inherited(0), inherited(2), inherited(2)}, 0);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.place(2).node, 1);
  EXPECT_EQ(t.place(3).local_rank, 1);
  EXPECT_THROW(ulysses::check_sp_within_islands(RankLayout(4, 4), t, false), BadInput);   // SP 4 spans 2 machines
  // emulated nodes: one machine, distinct SLURMD_NODENAMEs and SLURM_NODEIDs (tests/slurm)
  Topology e({{"n1", 0, 0, 0}, {"n1", 0, 1, 0}, {"n2", 1, 0, 0}, {"n2", 1, 1, 0}}, 0);
  EXPECT_EQ(e.num_nodes(), 2);
  EXPECT_EQ(e.place(2).node, 1);
  // SLURM_NODEID numbers the nodes where it names each exactly once (srun's order, which islands follow)
  Topology s({{"b", 1, 0, 0}, {"a", 0, 0, 1}}, 0);
  EXPECT_EQ(s.place(0).node, 1);
  EXPECT_EQ(s.place(1).node, 0);
}

namespace {

// The fabric ids of `world` ranks whose islands hold `per_island` consecutive ranks ("uuid/clique").
std::vector<std::string> fabric_blocks(int world, int per_island) {
  std::vector<std::string> ids;
  for (int g = 0; g < world; ++g) ids.push_back(fmt::format("00ff/{}", g / per_island));
  return ids;
}

}  // namespace

TEST(Topology, MeasuredIslandsAgreeingWithTheComputedOnes) {
  // GB200 NVL72 with --segment 18: 144 ranks on 36 nodes of 4, two racks, as computed and as the fabric says
  Topology t = Topology::uniform(144, 4, 72);
  EXPECT_EQ(t.measure_islands(fabric_blocks(144, 72)), "");
  EXPECT_TRUE(t.islands_measured());
  EXPECT_EQ(t.num_islands(), 2);
  EXPECT_EQ(t.island_ranks(), 72);
  EXPECT_EQ(t.place(71).island, 0);
  EXPECT_EQ(t.place(72).island, 1);
}

TEST(Topology, MeasuredIslandsOverruleAWrongIslandSize) {
  // --island-size 72 claimed, but Slurm placed the job's 18 nodes on two racks, 9 + 9 (no --segment, or a
  // slurm.conf block listed out of order): the fabric says islands of 36, and SP 72 must be refused
  Topology t = Topology::uniform(72, 4, 72);
  EXPECT_NO_THROW(ulysses::check_sp_within_islands(RankLayout(72, 72), t, false));
  const std::string note = t.measure_islands(fabric_blocks(72, 36));
  EXPECT_NE(note.find("2 NVLink islands of up to 36 ranks, not the 1 of 72"), std::string::npos) << note;
  EXPECT_EQ(t.num_islands(), 2);
  EXPECT_EQ(t.island_ranks(), 36);
  try {
    ulysses::check_sp_within_islands(RankLayout(72, 72), t, false);
    FAIL() << "SP 72 over two racks accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("spans NVLink islands 0, 1"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("(measured from the GPU fabric): use --sp 1, 2, 3, 4, 6, 9, 12, 18, 36,"), std::string::npos)
        << e.hint();
  }
  EXPECT_NO_THROW(ulysses::check_sp_within_islands(RankLayout(72, 36), t, false));
  // islands larger than a node, measured, but --island-size 0: multi-node NVLink was not asked for (no IMEX check,
  // no NCCL_MNNVL_ENABLE=1): one island per node stays, with a warning
  Topology n = Topology::uniform(16, 4, 0);
  const std::string kept = n.measure_islands(fabric_blocks(16, 16));
  EXPECT_NE(kept.find("puts nodes 0 and 1 in one NVLink island, but --island-size keeps islands inside a node"),
            std::string::npos) << kept;
  EXPECT_FALSE(n.islands_measured());
  EXPECT_EQ(n.num_islands(), 4);
  EXPECT_THROW(ulysses::check_sp_within_islands(RankLayout(16, 16), n, false), BadInput);
  // the fabric may split a node's islands without being asked (a node's GPUs in two cliques)
  Topology split = Topology::uniform(8, 4, 0);
  EXPECT_NE(split.measure_islands(fabric_blocks(8, 2)), "");
  EXPECT_EQ(split.num_islands(), 4);
}

TEST(Topology, IslandsFollowTheFabricIdsNotRankOrder) {
  // ids interleaved over the ranks (a cyclic placement): each island is the ranks with one id, numbered by its lowest rank
  Topology t = Topology::uniform(4, 1, 4);   // four one-GPU nodes declared one multi-node island
  t.measure_islands({"u/5", "u/9", "u/5", "u/9"});
  EXPECT_EQ(t.place(0).island, 0);
  EXPECT_EQ(t.place(1).island, 1);
  EXPECT_EQ(t.place(2).island, 0);
  EXPECT_EQ(ulysses::sp_group_crossing_islands(RankLayout(4, 2), t), (std::vector<int>{0, 1}));
  // the same clique id in another cluster (uuid) is another island
  Topology c = Topology::uniform(2, 1, 0);
  c.measure_islands({"aa/1", "bb/1"});
  EXPECT_EQ(c.num_islands(), 2);
}

TEST(Topology, UnknownFabricKeepsTheComputedIslands) {
  Topology t = Topology::uniform(8, 4, 0);
  EXPECT_EQ(t.measure_islands(std::vector<std::string>(8, "")), "");   // H100 HGX, CPUs: nothing to measure
  EXPECT_FALSE(t.islands_measured());
  EXPECT_EQ(t.num_islands(), 2);
  std::vector<std::string> some = fabric_blocks(8, 8);
  some[5] = "";
  const std::string note = t.measure_islands(some);   // one GPU not registered with the fabric manager
  EXPECT_NE(note.find("ranks [5] report no GPU fabric (NVML clique) while rank 0 does"), std::string::npos) << note;
  EXPECT_FALSE(t.islands_measured());
  EXPECT_EQ(t.num_islands(), 2);
}

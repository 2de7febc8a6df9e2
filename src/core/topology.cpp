#include "core/topology.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ulysses {
namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1'000'000)
    throw BadInput(fmt::format("{}='{}' is not a non-negative integer", name, v),
                   fmt::format("unset {} or set it to the launcher's value", name));
  return static_cast<int>(n);
}

// "[0 1 2 3]", or "[0 1 2 ... 4095]" (first three and last) for long groups.
std::string short_list(const std::vector<int>& v) {
  if (v.size() <= 8) return fmt::format("[{}]", fmt::join(v, " "));
  return fmt::format("[{} {} {} ... {}]", v[0], v[1], v[2], v.back());
}

// A node is a machine (the ranks sharing memory: RankSelf::machine) and, within one, a host name (emulated nodes
// on one machine have distinct SLURMD_NODENAMEs). Both SLURM_NODEID and SLURMD_NODENAME are inherited from the
// batch step by ranks that mpiexec starts on other machines, so they alone cannot tell nodes apart.
// Nodes are numbered by SLURM_NODEID where it names each node exactly once, else by first appearance.
std::vector<int> node_numbers(const std::vector<RankSelf>& ranks) {
  const bool machines = std::all_of(ranks.begin(), ranks.end(), [](const RankSelf& r) { return r.machine >= 0; });
  std::map<std::pair<int, std::string>, int> first;   // (machine, host) → first-appearance number
  std::vector<int> out;
  for (const RankSelf& r : ranks)
    out.push_back(first.emplace(std::pair(machines ? r.machine : -1, r.host), static_cast<int>(first.size()))
                      .first->second);
  std::map<int, int> slurm_of, node_of_slurm;   // node ↔ SLURM_NODEID, when it is a one-to-one map
  bool one_to_one = true;
  for (std::size_t g = 0; g < ranks.size() && one_to_one; ++g) {
    const int id = ranks[g].node;
    one_to_one = id >= 0 && slurm_of.emplace(out[g], id).first->second == id &&
                 node_of_slurm.emplace(id, out[g]).first->second == out[g];
  }
  if (one_to_one)
    for (std::size_t g = 0; g < ranks.size(); ++g) out[g] = ranks[g].node;
  return out;
}

}  // namespace

RankSelf rank_self_from_env(const std::string& host_name) {
  RankSelf s;
  const char* slurm_host = std::getenv("SLURMD_NODENAME");
  s.host = slurm_host != nullptr && *slurm_host != '\0' ? slurm_host : host_name;
  s.node = env_int("SLURM_NODEID");
  for (const char* var : kLocalRankVariables) {
    s.local_rank = env_int(var);
    if (s.local_rank >= 0) break;
  }
  return s;
}

Topology::Topology(const std::vector<RankSelf>& ranks, int island_size) {
  ULY_CHECK(!ranks.empty(), "empty topology");
  if (island_size < 0) throw BadInput(fmt::format("--island-size ({}) must be 0 (a node) or positive", island_size),
                                      "pass 0 (one node) or the ranks per NVLink island, whole nodes (72 on GB200 NVL72)");
  const std::vector<int> node_of = node_numbers(ranks);
  std::map<int, int> seen_on_node;
  for (std::size_t g = 0; g < ranks.size(); ++g) {
    RankPlace p;
    p.host = ranks[g].host;
    p.node = node_of[g];
    p.local_rank = seen_on_node[p.node]++;
    if (ranks[g].local_rank >= 0 && ranks[g].local_rank != p.local_rank && local_rank_warning_.empty())
      local_rank_warning_ = fmt::format(
          "rank {} is local rank {} on node {} ({}) but its launcher variable ({}, the first set) says {}: using {} "
          "(mpiexec inside a Slurm allocation inherits SLURM_LOCALID; launch/bind.sh reads the same variables, so "
          "check its GPU choice)", g, p.local_rank, p.node, p.host, fmt::join(kLocalRankVariables, ", "),
          ranks[g].local_rank, p.local_rank);
    places_.push_back(std::move(p));
  }
  num_nodes_ = static_cast<int>(seen_on_node.size());
  ranks_per_node_.assign(static_cast<std::size_t>(seen_on_node.rbegin()->first) + 1, 0);
  for (const auto& [node, count] : seen_on_node) ranks_per_node_[static_cast<std::size_t>(node)] = count;

  int nodes_per_island = 1;
  const int per_node = seen_on_node.begin()->second;
  if (island_size > 0) {
    for (const auto& [node, count] : seen_on_node)
      if (count != per_node)
        throw BadInput(fmt::format("--island-size {} needs the same number of ranks on every node, but node {} has {} "
                                   "and node {} has {}", island_size, seen_on_node.begin()->first, per_node, node, count),
                       "launch the same number of tasks on every node (sbatch --ntasks-per-node)");
    if (island_size % per_node != 0)
      throw BadInput(fmt::format("--island-size ({}) is not a multiple of the ranks per node ({})", island_size, per_node),
                     fmt::format("an island is whole nodes: e.g. --island-size {} ({} nodes); 0 means one node",
                                 per_node * std::max(1, island_size / per_node), std::max(1, island_size / per_node)));
    nodes_per_island = island_size / per_node;
  }
  multi_node_islands_ = nodes_per_island > 1;
  island_ranks_ = island_size > 0 ? island_size : per_node;
  std::set<int> islands;
  for (auto& p : places_) {
    p.island = p.node / nodes_per_island;
    islands.insert(p.island);
  }
  num_islands_ = static_cast<int>(islands.size());
}

Topology Topology::uniform(int world, int ranks_per_node, int island_size) {
  ULY_CHECK(world > 0 && ranks_per_node > 0, "world {} ranks_per_node {}", world, ranks_per_node);
  std::vector<RankSelf> ranks;
  for (int g = 0; g < world; ++g)
    ranks.push_back({fmt::format("node{}", g / ranks_per_node), g / ranks_per_node, g % ranks_per_node});
  return Topology(ranks, island_size);
}

std::string Topology::measure_islands(const std::vector<std::string>& fabric) {
  ULY_CHECK(fabric.size() == places_.size(), "{} fabric ids for {} ranks", fabric.size(), places_.size());
  std::vector<int> unknown;
  for (std::size_t g = 0; g < fabric.size(); ++g)
    if (fabric[g].empty()) unknown.push_back(static_cast<int>(g));
  if (unknown.size() == fabric.size()) return "";
  if (!unknown.empty()) {
    const auto known = std::find_if(fabric.begin(), fabric.end(), [](const std::string& f) { return !f.empty(); });
    return fmt::format("ranks {} report no GPU fabric (NVML clique) while rank {} does: NVLink islands of {} ranks "
                       "computed from --island-size, not measured", short_list(unknown), known - fabric.begin(),
                       island_ranks_);
  }
  std::map<std::string, int> island_of;   // fabric id → island, numbered by its lowest rank
  std::map<int, int> size_of;             // island → ranks
  std::map<int, int> node_in;             // island → a node of it
  bool same = true;                       // the measured partition equals the computed one
  std::map<int, int> computed_to_measured;
  for (std::size_t g = 0; g < places_.size(); ++g) {
    const int island = island_of.emplace(fabric[g], static_cast<int>(island_of.size())).first->second;
    same = same && computed_to_measured.emplace(places_[g].island, island).first->second == island;
    ++size_of[island];
    const int node = node_in.emplace(island, places_[g].node).first->second;
    if (node != places_[g].node && !multi_node_islands_)   // multi-node NVLink only where the launch asked for it
      return fmt::format("the GPU fabric (NVML clique ids) puts nodes {} and {} in one NVLink island, but --island-size "
                         "keeps islands inside a node: one island per node (pass --island-size, SEGMENT in the sbatch, "
                         "to use multi-node NVLink)", node, places_[g].node);
  }
  same = same && computed_to_measured.size() == island_of.size();
  const int computed_islands = num_islands_, computed_ranks = island_ranks_;
  for (std::size_t g = 0; g < places_.size(); ++g) places_[g].island = island_of.at(fabric[g]);
  num_islands_ = static_cast<int>(island_of.size());
  island_ranks_ = 0;
  for (const auto& [island, ranks] : size_of) island_ranks_ = std::max(island_ranks_, ranks);
  islands_measured_ = true;
  if (same) return "";
  return fmt::format("the GPU fabric (NVML clique ids) makes {} NVLink island{} of up to {} ranks, not the {} of {} "
                     "computed from --island-size: using the fabric's (check sbatch --segment and ISLAND_SIZE)",
                     num_islands_, num_islands_ == 1 ? "" : "s", island_ranks_, computed_islands, computed_ranks);
}

const RankPlace& Topology::place(int g) const {
  ULY_CHECK(g >= 0 && g < world(), "rank {} outside world of {}", g, world());
  return places_[static_cast<std::size_t>(g)];
}

int Topology::ranks_on_node(int node) const {
  ULY_CHECK(node >= 0 && node < static_cast<int>(ranks_per_node_.size()), "node {} unknown", node);
  return ranks_per_node_[static_cast<std::size_t>(node)];
}

std::vector<int> sp_group_crossing_islands(const RankLayout& layout, const Topology& topo) {
  ULY_CHECK(layout.world() == topo.world(), "layout world {} vs topology world {}", layout.world(), topo.world());
  for (int d = 0; d < layout.dp(); ++d)
    for (int r = 0; r < layout.ring(); ++r) {   // each Ulysses group (the SP group without a ring)
      std::vector<int> group = layout.ulysses_group_of(layout.global_rank(r * layout.ulysses(), d));
      const int island = topo.place(group.front()).island;
      for (int g : group)
        if (topo.place(g).island != island) return group;
    }
  return {};
}

void check_sp_within_islands(const RankLayout& layout, const Topology& topo, bool allow) {
  if (layout.world() != topo.world())
    throw BadInput(fmt::format("the rank layout has {} ranks but the launcher placed {}", layout.world(), topo.world()),
                   "launch the ranks the layout asks for (--world, SLURM_NTASKS)");
  const std::vector<int> group = sp_group_crossing_islands(layout, topo);
  if (group.empty() || allow) return;
  std::set<int> islands;
  std::set<std::string> hosts;
  for (int g : group) {
    islands.insert(topo.place(g).island);
    hosts.insert(topo.place(g).host);
  }
  std::vector<int> fits;
  for (int sp = 1; sp <= layout.world(); ++sp)
    if (layout.world() % sp == 0 && sp_group_crossing_islands(RankLayout(layout.world(), sp), topo).empty())
      fits.push_back(sp);
  // the least multiple of this ring degree whose Ulysses groups stay inside the islands: its Ulysses degree divides
  // this one, so heads that split over this one split over it (the trainer checks them once it reads the model)
  int ring = 0;
  for (int r = 2 * layout.ring(); r <= layout.sp() && ring == 0; r += layout.ring())
    if (layout.sp() % r == 0 && sp_group_crossing_islands(RankLayout(layout.world(), layout.sp(), r), topo).empty())
      ring = r;
  const std::string island_kind =
      topo.islands_measured() ? "measured from the GPU fabric"
      : topo.island_ranks() == topo.ranks_on_node(topo.place(0).node)
          ? "one node each; on GB200 NVL72 pass --island-size 72 with sbatch --segment"
          : "--island-size";
  throw BadInput(
      fmt::format("{} {} (--sp {}{}) spans NVLink islands {} (hosts {}): its all-to-alls would cross the "
                  "inter-node network", layout.ring() > 1 ? "Ulysses group" : "SP group", short_list(group), layout.sp(),
                  layout.ring() > 1 ? fmt::format(" --sp-ring {}", layout.ring()) : "", fmt::join(islands, ", "),
                  fmt::join(hosts, ", ")),
      fmt::format("islands hold {} ranks ({}): use --sp {}{}, or --allow-sp-across-islands to accept the slower "
                  "exchange", topo.island_ranks(), island_kind, fmt::join(fits, ", "),
                  ring == 0 ? "" : fmt::format(", or --sp {} --sp-ring {} (Ulysses inside each island × a ring "
                                               "across them; pack with the same)", layout.sp(), ring)));
}

}  // namespace ulysses

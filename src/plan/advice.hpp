// What to change when a plan does not fit, and which layout to choose — the planner's and the trainer's
// answers to "what would make it fit" come from here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/memory_model.hpp"

namespace ulysses::plan {

// "Fits" here means: S is a multiple of sequence_unit, the memory plan fits and no kernel's tensor passes 2^31
// elements (tensor_limit.hpp); an explicit head-group count the heads cannot form at that SP degree does not fit.

// What makes S fit, said as what to do, memory flags before hardware: the first single change in this order —
// shard the states, offload the optimizer, checkpoint, TiledMLP, tiled logits, offload every layer's input,
// attention in head groups (auto), offload the parameters — ("add --offload-optimizer"), else the flags
// choose_memory_flags adds together ("add --offload-optimizer --tiled-mlp --tiled-logits"), else a larger SP degree
// among the ranks there are ("use --sp 8"), else more nodes, up to 16× as many, said in totals ("use 4 nodes in all
// with --sp 32 (32 ranks, 8 a node)"). nullopt: none does.
std::optional<std::string> suggest_fix(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                       const Profile& p, const Machine& m, std::int64_t seq_len);

// The memory flags to run with (ulysses-plan --choose-memory-flags, the sbatch's MEMORY_ARGS=choose): `flags` with
// suggest_fix's changes added one after another in its order, each kept that changes what runs, until S fits — the
// first of that chain that fits; nullopt when even all of them do not. --sharding no_shard stays (the offloads are
// then skipped).
std::optional<MemoryFlags> choose_memory_flags(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                               const Profile& p, const Machine& m, std::int64_t seq_len);

// --attention-head-groups auto made a number for this layout (other values are returned as they are): the least G
// the heads allow (arch::valid_head_groups) whose tensors stay under 2^31 elements and whose plan fits at seq_len;
// where none fits memory, the least under the tensor limit (the memory refusal then says what binds), else the
// largest. seq_len 0 (the longest length is wanted): the largest G, whose memory is the least at every length.
// With --prefetch auto, a G (given, or tried by auto) whose plan fits only without the next group issued ahead runs its
// groups in turn (heads_in_turn): the overlap is had where it fits, never at the cost of the length (seq_len 0: in
// turn).
MemoryFlags settle_head_groups(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                               const Profile& p, const Machine& m, std::int64_t seq_len);

// SP degrees the model's heads allow (H % P == 0, Hkv % P == 0 or P % Hkv == 0) that divide `world`.
std::vector<int> valid_sp_degrees(const arch::ModelConfig& c, int world);
// Of those, the ones whose groups stay inside l's NVLink islands (unless it allows crossing them): what the trainer
// accepts there, and so all that the advice and --sp choose offer.
std::vector<int> sp_degrees(const arch::ModelConfig& c, const Layout& l);

// The (SP, ring) layouts --sp choose considers: each SP degree dividing the world, with each ring degree R dividing
// it (R = 1 first) whose Ulysses degree SP/R the heads allow and whose Ulysses groups stay inside l's islands (unless
// it allows crossing them) — past the head limit and across islands only with a ring. Ordered by SP, then R.
struct SpRing {
  int sp = 1, ring = 1;
};
std::vector<SpRing> sp_ring_degrees(const arch::ModelConfig& c, const Layout& l);

// BadInput when sequences of seq_len tokens (what `source` holds) do not split over --sp `sp`, its hint the degrees
// the model's heads, the world and the length allow (the loader's own check knows the length alone); with a ring
// (--sp-ring `ring`), also when they do not split into 2 × sp pieces (core's check_ring_split).
void check_sp_for_length(const arch::ModelConfig& c, int world, int sp, std::int64_t seq_len,
                         const std::string& source, int ring = 1);

// BadInput when `world` ranks do not split into groups of --sp `sp`, its hint the degrees the model's heads and the
// world allow (RankLayout's own check knows the world alone).
void check_sp_for_world(const arch::ModelConfig& c, int world, int sp);

// --sp choose: the layout that reaches `target` tokens, among sp_ring_degrees. fewest_gpus: the fewest whole nodes
// (of l.nodes), then the smallest SP degree that fits there, then the smallest ring degree; else (throughput) all
// nodes and the smallest SP (then ring) that fits (more data parallelism, less all-to-all traffic per token). nullopt
// when no layout reaches it. choose_flags (--choose-memory-flags beside --sp choose): each layout is tried with the
// memory flags choose_memory_flags picks for it, and the choice carries them.
struct Choice {
  Layout layout;
  MemoryFlags flags;   // `flags`, or with choose_flags the ones chosen for this layout
  std::string why;     // one sentence
};
std::optional<Choice> choose_layout(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                    const Profile& p, const Machine& m, std::int64_t target, bool fewest_gpus,
                                    bool choose_flags = false);

}  // namespace ulysses::plan

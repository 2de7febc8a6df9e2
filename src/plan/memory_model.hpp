// The memory of one training rank, predicted from the model description, the layout and the memory features —
// nothing built, torch-free (ulysses-plan, ulysses-train's start-up refusal and --dry-run share it).
//
// Per rank, T = micro_batch × S / P tokens (P the SP degree). Device memory, by category:
//   weights, gradients, optimizer  plan_states: the exact shard arithmetic (+ the bf16 copies autocast keeps
//                                  of replicated weights)
//   gathered units                 sharded: the largest unit gathered whole in its gather dtypes, with its fp32
//                                  gradient before the reduce-scatter (--offload-params: + its shard copied over)
//   saved activations              checkpointing: the kept layer inputs, ckpt_bytes × hidden × T per layer not
//                                  offloaded; plain: every layer's intermediates, saved_factor × counted (the
//                                  MLP's: mlp_factor × counted, none with TiledMLP)
//   layer working set              one layer's forward + backward: work_factor × counted + mlp_factor × the MLP's
//                                  (its rows: one tile with TiledMLP, else T); the heads' tensors (q, k, v, the
//                                  all-to-alls, attention's output) / G with --attention-head-groups G; with a
//                                  sliding window (Mistral) also the [B, 1, S, S] mask and the scores of H/P heads
//   loss chunk                     loss_factor × rows × V × 4 (rows: one chunk with tiled logits, else T)
//   communication buffers          the all-to-all's send and receive buffers of q, k, v (P > 1), of one head group
//   fixed                          the profile's device_fixed (CUDA context, allocator, NCCL)
// Host memory per rank: the offloaded optimizer states (and --offload-params' copies), the offloaded layer inputs
// and the process (the profile's host_fixed). On a CPU device the host is the device: every byte above is host
// memory, and the node's memory is shared by its ranks.
//
// "counted" is element arithmetic over the layer's tensors (memory_model.cpp); the factors that turn counts
// into bytes and the fixed costs are a Profile: measured by `ulysses-train --calibrate-memory` (two lengths ×
// four feature sets), or the built-in defaults of docs/planning.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arch/model_config.hpp"
#include "arch/parameters.hpp"
#include "plan/memory_flags.hpp"
#include "plan/profile.hpp"
#include "plan/state_layout.hpp"

namespace ulysses::plan {

struct Layout {
  int nodes = 1, ranks_per_node = 1, sp = 1;
  std::int64_t micro_batch = 1;
  int island = 0;                // ranks per NVLink island (--island-size); 0: a node's
  bool across_islands = false;   // --allow-sp-across-islands: SP groups may span islands
  int ring = 1;                  // --sp-ring: SP = Ulysses degree × ring degree
  int world() const { return nodes * ranks_per_node; }
  int ulysses() const { return sp / ring; }   // the degree the heads split over
  int island_ranks() const { return std::min(island > 0 ? island : ranks_per_node, world()); }
  // Whether SP groups of p consecutive ranks stay inside the islands: the trainer's own rule
  // (core/topology.hpp's sp_group_crossing_islands) on a uniform placement of this layout.
  bool sp_within_islands(int p) const;
};

inline constexpr double kUsableFraction = 0.92;   // of device and host memory a plan may fill

struct Machine {   // what one node offers
  bool cuda = false;                 // false: the ranks' "device" is host memory
  std::int64_t device_bytes = 0;     // one GPU's memory (cuda)
  std::int64_t host_bytes = 0;       // the node's memory (cgroup limit or MemTotal)
  double headroom = 0;               // of the usable bytes, the fraction ulysses-plan keeps free (--headroom)
  // Of `total` bytes (one GPU's, or the node's), what a plan may fill: kUsableFraction, less the headroom.
  std::int64_t usable(std::int64_t total) const {
    return static_cast<std::int64_t>(kUsableFraction * (1 - headroom) * static_cast<double>(total));
  }
};

struct Breakdown {   // bytes of one rank
  std::int64_t weights = 0, gradients = 0, optimizer = 0, gathered = 0, saved = 0, working = 0, loss = 0, comm = 0,
               device_fixed = 0;
  std::int64_t host_states = 0, host_checkpoints = 0, host_fixed = 0;
  std::int64_t device() const {
    return weights + gradients + optimizer + gathered + saved + working + loss + comm + device_fixed;
  }
  std::int64_t host() const { return host_states + host_checkpoints + host_fixed; }
  std::vector<std::pair<std::string, std::int64_t>> device_lines() const;   // label, bytes; for tables
  std::vector<std::pair<std::string, std::int64_t>> host_lines() const;
};

// LoRA's adapter parameters: rank × (in + out) of each adapted projection (0 without LoRA).
std::int64_t lora_parameter_count(const arch::ModelConfig& c, const Features& f);

Breakdown predict(const arch::ModelConfig& c, const Layout& l, const Features& f, const Profile& p,
                  std::int64_t seq_len);

// What binds: nothing (fits), the device (GPU memory per rank) or the node's host memory.
struct Fit {
  bool fits = true;
  std::string limit;          // "" when it fits; else "device" or "host"
  std::int64_t need = 0, have = 0;   // bytes of the binding limit: needed, and usable (kUsableFraction)
};
Fit check_fit(const Breakdown& b, const Layout& l, const Machine& m);

// Multiples of what packing needs (P × 64 tokens: ulysses-pack's default alignment).
std::int64_t sequence_unit(int sp, int ring = 1);
// The longest sequence that fits — memory, and no kernel's tensor past 2^31 elements (tensor_limit.hpp; where the
// profile's stack has the limit) —, a multiple of sequence_unit(sp), up to `ceiling`; 0 when nothing fits.
std::int64_t longest_sequence(const arch::ModelConfig& c, const Layout& l, const Features& f, const Profile& p,
                              const Machine& m, std::int64_t ceiling = std::int64_t{1} << 32);

// Model FLOPs of one step over all ranks: 6·M·T + 6·L·H·D·Σd² — M = arch::active_matmul_parameter_count (a routed
// layer's k experts of E, its router and shared expert: what a token computes with), T the step's tokens, L layers, H query heads, D head_dim, Σd² over every document of every sequence of the step
// (attention_pairs; 2·d·w − w² for a document longer than a sliding window w). Forward causal attention over a document of d tokens is 2·H·D·d² per layer (QKᵀ and PV,
// each 2·H·D·d² dense, half of it causal); backward twice that. Recomputation is not counted. Megatron's
// formula counts 12·L·H·D·S·T (dense, whole rows) and ALST's the same; for one document per row, Σd² = S·T and
// this is half of theirs; for packed rows of many documents it is far less (8K-token documents in a 1M row:
// 1/128).
double step_flops(const arch::ModelConfig& c, double tokens, double attention_pairs);

}  // namespace ulysses::plan

// The memory flags, shared word for word by ulysses-train (what a run does) and ulysses-plan (what it would
// need): how the model states are held (sharding, optimizer offload), the precision, and the activation
// features. resolve() turns the flags into what actually happens — the rules live here once, so the planner's
// arithmetic and the trainer's model agree by construction:
//   sharding auto      full_shard when world > 1 or the optimizer is offloaded (FSDP's names; DeepSpeed ZeRO-3)
//   --offload-params   implies --offload-optimizer (the weights' copies are made from the host masters)
//   sharded states     always recompute each layer in backward (their weights are gathered again there)
//   --offload-checkpoints N (or -1: every layer) implies --activation-checkpointing
//   --mlp-tile-tokens / --logits-chunk-tokens imply --tiled-mlp / --tiled-logits; their defaults: a tile of
//   `hidden` tokens (ALST), a chunk of about 1 GiB of fp32 logits
//   --prefetch auto    on for a GPU (the work issued ahead overlaps compute on side streams), off for a CPU
//                      (there it would only hold one more gathered unit / layer input)
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "arch/model_config.hpp"
#include "plan/precision.hpp"

namespace ulysses::plan {

inline constexpr std::int64_t kAutoHeadGroups = 0;   // --attention-head-groups auto

struct MemoryFlags {
  std::string precision = "fp32";          // fp32, bf16 (the model in bf16) or amp-bf16 (autocast over fp32);
                                           // fp32 masters and AdamW in every mode (model/precision.hpp)
  std::string reduce_dtype = "fp32";       // the dtype gradients are summed over ranks in: fp32 or bf16
  bool fp32_residual = false;              // --precision bf16 with an fp32 residual stream
  std::int64_t attention_head_groups = 1;  // each layer's attention in this many groups of heads; kAutoHeadGroups:
                                           // the least that fits (settle_head_groups, plan/advice.hpp)
  std::string sharding = "auto";           // full_shard, hybrid_shard, no_shard; auto: see above
  bool offload_optimizer = false;          // sharded masters, gradients and AdamW state in host memory
  bool offload_params = false;             // and the shards' compute-dtype copies too (DeepSpeed's offload_param)
  bool activation_checkpointing = false;   // keep each decoder layer's input only; recompute it in backward
  std::int64_t offload_checkpoints = 0;    // keep the first N layers' inputs in host memory (-1: all)
  bool tiled_mlp = false;                  // each layer's norm + MLP over token tiles (ALST's TiledMLP)
  std::int64_t mlp_tile_tokens = 0;        // tokens per tile (0: hidden size)
  bool tiled_logits = false;               // head + cross-entropy over token chunks
  std::int64_t logits_chunk_tokens = 0;    // tokens per chunk (0: ~1 GiB of fp32 logits)
  std::string prefetch = "auto";           // on, off; auto: on for a GPU (side streams), off for a CPU
  // Settled, not a flag (settle_head_groups, plan/advice.hpp): --prefetch auto's head groups run in turn, the next
  // group not issued ahead, where its q, k, v do not fit beside a group's work at the length
  bool heads_in_turn = false;
  // LoRA (model/lora.hpp): adapters of this rank on the projections named, the base frozen; 0 = full fine-tuning
  std::int64_t lora_rank = 0;
  double lora_alpha = 8;                   // scale alpha / rank (PEFT's lora_alpha default)
  double lora_dropout = 0;                 // 0 only
  bool lora_rslora = false;                // scale alpha / √rank
  std::vector<std::string> lora_targets{"q_proj", "v_proj"};   // PEFT's module names (its Llama default), all-linear
};
// The tools' memory flags. --precision's default there is auto: settle_precision makes it bf16 on a GPU, fp32 on a
// CPU, once the device is known (the struct's own default, for code that builds flags, stays fp32).
void add_memory_flags(CLI::App& app, MemoryFlags& flags);   // with add_lora_flags
void add_lora_flags(CLI::App& app, MemoryFlags& flags);
// --lora-targets expanded: all-linear → the seven projections; the names in model order, each once.
std::vector<std::string> lora_targets(const std::vector<std::string>& given);
// BadInput for MLP projections among the (expanded) targets of a mixture of experts: PEFT would adapt its experts'
// projections by those names, which this trainer does not build (its routers and experts carry no adapters).
void check_lora_on_experts(const std::vector<std::string>& targets, const arch::ModelConfig& c);
void settle_precision(MemoryFlags& flags, bool gpu);
// The command-line flags that give `flags` back through add_memory_flags, --precision left out (the sbatch's
// PRECISION variable carries it): the sbatch's MEMORY_ARGS. Defaults are not written; "" when all are defaults.
std::string memory_args(const MemoryFlags& flags);
std::string head_groups_name(std::int64_t groups);   // "auto" or the number

enum class Sharding { kNone, kFull, kHybrid };
const char* sharding_name(Sharding s);

// --prefetch's value resolved: on, or auto on a GPU.
inline bool prefetches(const std::string& prefetch, bool cuda) {
  return prefetch == "on" || (prefetch == "auto" && cuda);
}

struct Features {   // resolved
  bool bf16 = false;               // the matmuls in bf16: --precision bf16 or amp-bf16
  bool bf16_activations = false;   // --precision bf16: every weight copy, activation and kept layer input in bf16
  bool reduce_bf16 = false;        // --reduce-dtype bf16
  bool fp32_residual = false;      // --fp32-residual: the bf16 model's residual stream and kept inputs in fp32
  std::int64_t attention_head_groups = 1;   // --attention-head-groups
  Sharding sharding = Sharding::kNone;
  bool offload_optimizer = false;
  bool offload_params = false;     // the device keeps no weight shard: each unit's comes from host memory to run
  bool activation_checkpointing = false;
  std::int64_t offload_checkpoints = 0;   // layers, ≤ num_layers
  std::int64_t mlp_tile_tokens = 0;       // 0: untiled
  std::int64_t logits_chunk_tokens = 0;   // 0: whole logits
  std::string prefetch = "auto";           // as given; prefetches() resolves auto with the device
  bool heads_in_turn = false;              // settled: the head groups not issued ahead (MemoryFlags)
  std::int64_t lora_rank = 0;              // LoRA: adapters of this rank, the base frozen (0: full fine-tuning)
  double lora_alpha = 0;
  bool lora_rslora = false;
  std::vector<std::string> lora_targets;   // expanded: all-linear → the seven projections, in model order
  int compute_bytes() const { return bf16 ? 2 : 4; }   // of a matrix's gathered copy and the matmuls' operands
  // Of the residual stream and each kept (or offloaded) layer input: 2 in bf16; autocast (and --fp32-residual) keep
  // them fp32.
  int activation_bytes() const { return bf16_activations && !fp32_residual ? 2 : 4; }
  int other_weight_bytes() const { return bf16_activations ? 2 : 4; }   // norms, biases, the table: gathered copies
  // Gathers of the next unit and copies back of offloaded layer inputs issued ahead (on a GPU's side streams).
  bool prefetches(bool cuda) const { return plan::prefetches(prefetch, cuda); }

  // Each activation feature's memory term, beside its flag (plan/memory_model.cpp and plan/tensor_limit.cpp count
  // with them; T tokens a rank):
  // --tiled-mlp: the MLP's rows alive at once; forward keeps only the tiles' input (saves_mlp_rows false)
  std::int64_t mlp_rows(std::int64_t T) const { return mlp_tile_tokens > 0 ? std::min(T, mlp_tile_tokens) : T; }
  bool saves_mlp_rows() const { return mlp_tile_tokens == 0; }
  // --tiled-logits: the logits' rows alive at once, and the fp32 [vocab, hidden] head gradient its chunks add into
  std::int64_t logit_rows(std::int64_t T) const {
    return logits_chunk_tokens > 0 ? std::min(T, logits_chunk_tokens) : T;
  }
  bool logits_gradient_buffer() const { return logits_chunk_tokens > 0; }
  // --attention-head-groups G > 1: forward keeps only the groups' input, their heads' tensors recomputed group by
  // group in backward (and one group's alive at a time: memory_model.cpp's counts)
  bool saves_head_tensors() const { return attention_head_groups <= 1; }
  // ... and where a flash kernel takes attention (a CPU; a GPU in bf16 at a head size flash has) without a ring, the
  // groups' output (the heads' output, whole) is kept with attention's log-sum-exp (float, one per token and head:
  // model/attention.hpp)
  bool keeps_head_output(bool cuda, std::int64_t head_dim, int ring) const {
    return attention_head_groups > 1 && ring == 1 && (!cuda || (bf16 && arch::flash_head_dim(head_dim)));
  }
  // ... and with --prefetch the next group's q, k, v (after the all-to-all) are issued ahead, alive beside a group's
  // work (auto: where they fit)
  bool issues_heads_ahead(bool cuda) const { return attention_head_groups > 1 && prefetches(cuda) && !heads_in_turn; }
  // --activation-checkpointing, --offload-checkpoints N, --prefetch: of `layers` layer inputs, those kept on the
  // device — the ones not offloaded, and with prefetch the one copied back a layer ahead — and in host memory
  double device_kept_inputs(double layers, bool cuda) const {
    return layers - static_cast<double>(offload_checkpoints) + (offload_checkpoints > 0 && prefetches(cuda) ? 1 : 0);
  }
  double host_kept_inputs() const { return static_cast<double>(offload_checkpoints); }
};
// BadInput for --sharding no_shard with --offload-optimizer or --offload-params, for sharding or offloaded states with
// LoRA (replicated only: auto means no_shard there), for --fp32-residual without
// --precision bf16, and for head groups the model's heads cannot form at --sp `sp` (arch::check_head_groups).
// --attention-head-groups auto must be settled first (settle_head_groups: it depends on the length and the machine).
Sharding resolve_sharding(const MemoryFlags& flags, int world);
Features resolve(const MemoryFlags& flags, const arch::ModelConfig& c, int world, int sp = 1);
// The flags' dtype plan (precision.hpp), --precision settled: what resolve's precision fields and the trainer's
// model both come from.
DtypePlan dtype_plan(const MemoryFlags& flags);
// Ranks one shard group has: every rank (full), the SP group (hybrid), 0 (replicated).
int shard_ranks(Sharding s, int world, int sp);
// The chunk of about `bytes` of fp32 logits for a vocabulary of `vocab`: at least one token.
std::int64_t default_logits_chunk_tokens(std::int64_t vocab, std::int64_t bytes = std::int64_t{1} << 30);

}  // namespace ulysses::plan

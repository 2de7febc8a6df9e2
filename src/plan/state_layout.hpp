// The layout of the model states when they are sharded, and their bytes per rank — from parameter names and
// shapes alone (torch-free): the sharded model (model/sharded_states) builds its flat groups from this, and the
// planner, --dry-run and the start-up refusal count bytes with the same arithmetic, nothing built.
//
// Units (what is gathered whole at once): model.embed_tokens, model.layers.N, and "head" (model.norm.*, lm_head.*).
// A unit has at most two groups (four with LoRA), each one flat vector split evenly over the shard group (the last
// shard padded): "<unit>.matrices" (2-d weights of matrix products, gathered in the compute dtype, decayed) and
// "<unit>.others" (norms, biases and the embedding table: gathered in fp32, or bf16 under --precision bf16; decayed
// iff 2-d, the table). Parameters that are not trained (LoRA's frozen base) go into groups of their own,
// "<unit>.frozen_matrices" and "<unit>.frozen_others", held in their gather dtype only: no fp32 master, gradient or
// AdamW state; LoRA's adapters are trained matrices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_config.hpp"
#include "arch/parameters.hpp"

namespace ulysses::plan {

struct Parameter {
  std::string name;                 // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;
  bool trained = true;              // false: LoRA's frozen base
  std::int64_t numel() const;
};

struct StateLayout {
  struct Group {
    std::string name;            // "<unit>.matrices" or "<unit>.others"
    bool matrix = false;         // gathered in the compute dtype (else in the other weights' dtype)
    bool decay = false;          // AdamW weight decay applies
    bool trained = true;         // false: frozen, held in the gather dtype only
    std::int64_t numel = 0;      // of its parameters, unpadded
    std::vector<int> params;     // indices into the parameter list, in flat order
  };
  struct Unit {
    std::string name;
    std::vector<int> params;     // module order
    std::vector<int> groups;
  };
  struct Place {
    int group = 0;
    std::int64_t offset = 0;     // in the group's flat vector
  };
  std::vector<Group> groups;
  std::vector<Unit> units;
  std::vector<Place> places;     // per parameter
};

// params in module order; every unit's parameters must be contiguous (ULY_CHECK otherwise).
StateLayout state_layout(const std::vector<Parameter>& params);
// The model's parameters; with lora_rank > 0 LoRA's adapters on `lora_targets` beside their projections (trained),
// the base frozen — the order the model registers them.
std::vector<Parameter> parameters_of(const arch::ModelConfig& c, std::int64_t lora_rank = 0,
                                     const std::vector<std::string>& lora_targets = {});

// Bytes per element of each group's gathered copy: the matrices' (the compute dtype) and the others' (fp32, or bf16
// when the whole model is bf16).
struct GatherBytes {
  int matrices = 4, others = 4;
};

// What one rank of `world` shard ranks holds: elements of its trained fp32 shards (Σ over groups of ceil(numel / W))
// and bytes of their copies in the gather dtypes; the frozen groups' shards, which are held in the gather dtype only.
struct ShardSize {
  std::int64_t elements = 0, compute_copy_bytes = 0;
  std::int64_t frozen_bytes = 0;
};
ShardSize shard_size(const StateLayout& layout, int world, GatherBytes bytes);

// The largest unit gathered whole: bytes in its gather dtypes, and its trained element count (their fp32 gradient
// exists whole until the reduce-scatter). Tied embeddings: the head unit gathers the table too.
struct UnitSize {
  std::int64_t gathered_bytes = 0, elements = 0;   // the largest unit (tied: the head with the embeddings)
  std::int64_t layer_gathered_bytes = 0;           // the largest decoder layer: what a prefetch holds beside it
};
UnitSize largest_unit(const StateLayout& layout, bool tied_embeddings, GatherBytes bytes);

struct StateBytes {   // per rank, in one place (device or host memory)
  std::int64_t weights = 0, grads = 0, optimizer = 0;
  std::int64_t total() const { return weights + grads + optimizer; }
};
// Model-state bytes per rank: fp32 weights, fp32 gradients and two fp32 AdamW moments, replicated (shards = 0)
// or sharded over `shards` ranks; with the optimizer offloaded all of that is host memory and the device keeps
// the shards' compute-dtype copies — unless the parameters are offloaded too: then those copies are host memory.
// Frozen shards (LoRA's base) are held as those copies are.
struct StatePlan {
  StateBytes device, host;
  std::int64_t host_copies = 0;   // --offload-params: the shards' compute-dtype copies, page-locked
};
struct Offload {
  bool optimizer = false, params = false;   // params implies optimizer (plan::resolve)
};
// params: parameters_of(); replicated (shards 0) it counts only the trained ones' fp32 states (LoRA's replicated frozen
// base is the memory model's to count).
StatePlan plan_states(const std::vector<Parameter>& params, int shards, Offload offload, GatherBytes bytes);

}  // namespace ulysses::plan

// Recomputed units: activation checkpointing, and the only way a sharded model runs its units. A unit's
// forward keeps only its input; backward runs the unit again (inside the model's autocast scope, with its
// collectives — every rank recomputes the same units in the same order, so they still match) and
// back-propagates through that copy.
//
//   forward:  [gather the unit's weights;] y = f(x, weights) under no-grad; [free them]; saved: x only
//   backward: [gather again;] x' = x (detached, requires grad when floating); y' = f(x', w') with grad, w' the
//             gathered weights as leaves; backward(y', dy) → dx = x'.grad; [w'.grad reduce-scattered into
//             the shards' gradients (ShardedStates::add_gradients)]
//
// Not sharded (no states): f uses its module's own parameters, whose gradients accumulate into their .grad
// as in the plain path. Sharded: f computes with the gathered tensors; nothing else holds them, so a unit's
// whole weights exist only while it runs.
//
// Exact: the recomputation repeats the same deterministic operations, so the gradients equal the plain
// path's bit for bit (tested on CPU in fp32 and bf16). The rope tables and the attention plan are shared with
// the graph through f, not copied. A floating x must require grad (the embeddings are trained; checked).
//
// Checkpoint offload: the kept input goes to host memory (page-locked, of exactly its bytes, when it is on a GPU:
// host_buffers.hpp) and comes back for the recomputation. Exact (a copy). Both copies run on a side stream
// (side_stream.hpp): the copy out overlaps the next layers' forward; with prefetch, the backward of layer i issues
// the copy back of layer i-1's input, which overlaps layer i's recomputation. On a CPU device the copies run at
// once, through the same code.
//
// Prefetch of sharded weights: the forward of a unit issues the gathers of prefetch_forward (the next unit), its
// backward those of prefetch_backward (the unit before) — ShardedStates::prefetch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "model/host_buffers.hpp"
#include "model/precision.hpp"
#include "model/sharded_states.hpp"
#include "model/side_stream.hpp"

namespace ulysses::model {

// A unit's forward: its input and the unit's gathered parameters in module order (empty when not sharded: f
// uses its module's own) -> its outputs.
using UnitForward =
    std::function<torch::autograd::variable_list(const torch::Tensor& x, const std::vector<torch::Tensor>& weights)>;

// A layer input kept in host memory for backward (checkpoint offload), and its copy back to the device when the
// backward of the layer after it fetched it ahead. Shared by a layer's unit and the next layer's.
struct KeptInput {
  torch::Tensor host;   // the copy in host memory (page-locked for a CUDA input); undefined until the forward ran
  Ahead back;           // pending: the copy back to the device, issued ahead
};

// What checkpoint offload moved in the last forward and backward (reported in the log; checked by the tests).
struct OffloadCounts {
  std::atomic<std::int64_t> bytes{0};           // layer inputs copied to host memory
  std::atomic<std::int64_t> fetched_ahead{0};   // layer inputs whose copy back was issued ahead
};

struct Recompute {
  Precision precision = Precision::kFp32;             // the model's, re-entered for the recomputation
  std::shared_ptr<KeptInput> offload;                 // non-null: keep x in host memory, here
  std::shared_ptr<KeptInput> fetch_ahead;             // the previous layer's kept input: backward fetches it ahead
  std::shared_ptr<SideStream> copies;                 // where the copies run (needed with offload)
  std::shared_ptr<HostBuffers> host_memory;           // the host copies' memory (needed with offload)
  std::shared_ptr<OffloadCounts> counts;              // what offload copied (may be null)
  std::shared_ptr<ShardedStates> states;              // null: not sharded
  std::vector<int> units;                             // the units f computes with (states only), in order
  bool weights_in_backward = true;                    // false: backward passes placeholders (f is a lookup)
  std::vector<int> prefetch_forward;                  // units whose gathers the forward issues ahead (states only)
  std::vector<int> prefetch_backward;                 // the same for the backward
};

// f(x, weights) with only x kept for backward (on the host when options.offload). Outputs that get no
// gradient (kept logits) may be returned beside those that do.
torch::autograd::variable_list recomputed(UnitForward f, const torch::Tensor& x, const Recompute& options);

}  // namespace ulysses::model

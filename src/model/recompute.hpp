// The one recompute primitive: run a function on chunks of its work without keeping a graph, keep only its input
// (and the weights it was handed), and in backward run each chunk again with grad and back-propagate it before the
// next, so only one chunk's intermediates exist at a time — in forward and in backward.
//
//   forward (no graph):  y_c = f(chunk c, x_c, weights) for each chunk, under the precision's autocast;
//                        the outputs joined (one chunk: as f returned them; rows: concatenated; sum: added, in fp32
//                        at least; columns: the first added, the others concatenated along the last dim)
//                        saved: x (or, offloaded, its copy in host memory), the weights handed in [and the outputs
//                        that are not sums]
//   backward:            [x back from host memory;] [the units gathered again;] for each chunk: x_c' = x_c
//                        detached (a leaf when floating), y_c' = f(c, x_c', w') with grad under the same autocast
//                        (keep_outputs: c.kept = its share of y, which f may use instead of computing it again),
//                        backward(y_c', dy_c) → dx_c (its rows of dx; chunks of columns: summed), y_c' freed before
//                        that backward runs (its value is not needed there) and, one chunk, dy once its first nodes
//                        have read it (a layer's output gradient is not held through the layer's backward), dw summed
//                        over the chunks in the leaves' .grad; [the gathered weights' gradients reduce-scattered into
//                        the shards]
// Two stages (Recompute::ahead, with its side stream): a chunk's first stage — attention's projections and
// all-to-all — is issued for chunk c + 1 on the side stream before f runs chunk c, so the two overlap on a GPU; f
// gets its results in Chunk::ahead. In backward the same with grad (the first stage and f share the chunk's x_c'):
// chunk c + 1's first stage is issued before chunk c's recomputation and back-propagation, and autograd runs its
// backward on the side stream, as it ran. The order is the same on a CPU, where the stage runs at once: every rank
// issues the same stages in the same order, and one more chunk's first-stage results are alive beside a chunk's work.
//
// Where f's weights come from, in f's `weights` in this order:
//   handed in   tensors passed to recomputed() (TiledMLP's, the tiled loss's): inputs of the autograd node, whose
//               gradients it returns — those that require grad (LoRA's frozen base gets none, and none is computed);
//   gathered    sharded units (GatheredUnits): all-gathered for each pass; their gradients are reduce-scattered
//               into the shards (ShardedStates::add_gradients);
//   neither     f uses its module's own parameters, whose gradients accumulate into their .grad (checkpointing).
// The users: each decoder layer's unit (one chunk; activation checkpointing, and the only way a sharded unit runs),
// the embeddings' and the head's units (sharded), TiledMLP (chunks of rows), the tiled loss (chunks of rows, summed),
// attention's head groups (chunks of columns: each group's o_proj product added, its heads' output kept:
// attention.hpp).
//
// Exact: the recomputation repeats the same deterministic operations, so every chunk's gradients equal the plain
// path's bit for bit; what is summed over chunks (weight gradients, a summed output) is summed in another order
// (≤ 1e-6 relative in fp32). Collectives inside f stay matched: every rank runs the same chunks in the same order.
//
// Checkpoint offload (OffloadedInput): x goes to host memory (page-locked, of exactly its bytes, when it is on a GPU:
// host_buffers.hpp) and comes back for the recomputation; both copies run on a side stream (side_stream.hpp): the copy
// out overlaps the next layers' forward; with prefetch, the backward of layer i issues the copy back of layer i-1's
// input, which overlaps layer i's recomputation. On a CPU device the copies run at once, through the same code.
// Prefetch of sharded weights: the forward issues the gathers of prefetch_forward, the backward those of
// prefetch_backward (ShardedStates::prefetch).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "model/host_buffers.hpp"
#include "model/precision.hpp"
#include "model/sharded_states.hpp"
#include "model/side_stream.hpp"

namespace ulysses::model {

// One chunk of the work: rows [first, first + rows) of x (dim 0), the whole of x when not chunked by rows.
struct Chunk {
  std::int64_t index = 0;
  std::int64_t first = 0;
  std::int64_t rows = 0;
  // In backward with Recompute::keep_outputs: this chunk's share of each output the forward returned that is not a
  // sum, in output order (no graph); empty in the forward.
  std::vector<torch::Tensor> kept;
  // With Recompute::ahead: what the first stage returned for this chunk (issued ahead), for f; otherwise empty.
  std::vector<torch::Tensor> ahead;
};

// A chunk's forward: its slice of x and the weights (handed-in ones, then gathered ones) -> its outputs. Outputs that
// get no gradient (kept logits) may be returned beside those that do.
using ChunkForward = std::function<torch::autograd::variable_list(const Chunk& chunk, const torch::Tensor& x,
                                                                  const std::vector<torch::Tensor>& weights)>;

// How the work splits.
struct Chunking {
  std::int64_t rows = 0;      // > 0: chunks of this many rows of x (the last may be shorter); 0: one chunk, all of x
  bool sum_outputs = false;   // the chunks' outputs are added (a loss); otherwise concatenated along dim 0
  bool sum_trailing = false;  // rows: the first output concatenated, the others added (a tiled MoE block: its output
                              // and its routing statistics)
  std::int64_t columns = 0;   // > 0 (rows 0): this many chunks, each of all of x; their first outputs added (each
                              // chunk's backward gets the sum's whole gradient), the others, of equal sizes,
                              // concatenated along the last dim (attention's head groups: o_proj's products added,
                              // the heads' outputs and log-sum-exps side by side)
};

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

// Checkpoint offload: x is kept in host memory instead of on its device, and (or only) the previous layer's offloaded
// input is fetched back ahead.
struct OffloadedInput {
  std::shared_ptr<KeptInput> kept;            // where x's host copy lives (null: x stays on its device)
  std::shared_ptr<KeptInput> fetch_ahead;     // the previous layer's: backward issues its copy back ahead (or null)
  std::shared_ptr<SideStream> copies;         // where the copies run
  std::shared_ptr<HostBuffers> host_memory;   // the host copies' memory
  std::shared_ptr<OffloadCounts> counts;      // what was copied (may be null)
};

// Sharded units: f computes with these units' gathered parameters (each unit's in its parameter order).
struct GatheredUnits {
  std::shared_ptr<ShardedStates> states;
  std::vector<int> units;
  bool weights_in_backward = true;     // false: backward passes placeholders of their shapes (f is a lookup)
  std::vector<int> prefetch_forward;   // units whose gathers the forward issues ahead
  std::vector<int> prefetch_backward;  // the same for the backward
};

struct Recompute {
  Precision precision = Precision::kFp32;   // the autocast every chunk's f runs in, forward and backward
  Chunking chunking;
  std::optional<OffloadedInput> offload;    // x kept in host memory
  std::optional<GatheredUnits> gathered;    // sharded: the weights f computes with
  // The joined outputs that are not sums kept for backward, each chunk's share handed to f there (Chunk::kept):
  // saved as the node's own outputs (head groups: the heads' output and log-sum-exp attention's backward reads).
  bool keep_outputs = false;
  // A first stage (same arguments as f; its results reach f in Chunk::ahead), issued one chunk ahead on this side
  // stream: both or neither.
  ChunkForward ahead;
  std::shared_ptr<SideStream> ahead_stream;
};

// A weights struct's optional tensors, handed to f as a list: take() lists the defined ones among fixed slots and
// remembers which; put() sets them back into the same slots of a fresh struct inside f. The mask travels in f's
// closure, the tensors only through `weights` (a sharded unit's gathered weights must not outlive its run).
class SlotMask {
 public:
  std::vector<torch::Tensor> take(const std::vector<torch::Tensor*>& slots);
  // ws[first …] into the slots that were defined
  void put(const std::vector<torch::Tensor*>& slots, const std::vector<torch::Tensor>& ws,
           std::size_t first = 0) const;

 private:
  std::vector<bool> present_;
};

// f over x's chunks with only x (and `weights`) kept for backward; differentiable in x and `weights`. A floating x
// must require grad when grad is on (checked: else the units' parameters would get no gradient).
torch::autograd::variable_list recomputed(ChunkForward f, const torch::Tensor& x,
                                          const std::vector<torch::Tensor>& weights, const Recompute& options);

}  // namespace ulysses::model

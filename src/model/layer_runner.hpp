// LayerRunner: how each decoder layer runs, composed once from the memory features and the sharded states, so the
// decoder's loop is `h = runner(i, layer, h)` and never branches on a feature. Its pieces, each one function:
//   plain          neither checkpointing nor sharding: layer(h), its graph kept for backward
//   checkpointed   the layer recomputed in backward (recompute.hpp), only its input kept
//   offloaded      the inputs of the first offload_checkpoints layers kept in host memory; with prefetch the
//                  backward of layer i issues the copy back of layer i-1's input ahead
//   gathered       sharded: the layer computes with its unit's gathered weights; with prefetch the forward of layer i
//                  issues the gathers of layer i+1 (past the last layer: the head's units), its backward those of
//                  layer i-1 (the embeddings' backward gathers nothing). The embeddings and the head ask for theirs.
// A sharded layer is always recomputed: its whole weights exist only while it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "model/options.hpp"
#include "model/recompute.hpp"

namespace ulysses::model {

// A layer's forward: its input and its gathered weights in parameter order (empty when not sharded: the module's
// own) -> its output, then what else it returns (a sparse layer's routing statistics).
using LayerForward =
    std::function<torch::autograd::variable_list(const torch::Tensor& x, const std::vector<torch::Tensor>& weights)>;

class LayerRunner {
 public:
  LayerRunner(const ModelOptions& options, std::int64_t layers);

  // Sharded: the units of the embeddings, of each layer, and those the head runs with (after the last layer).
  void use_states(std::shared_ptr<ShardedStates> states, int embeddings, std::vector<int> layers,
                  std::vector<int> head);
  // Before a forward through the layers on `device`: the chain of offloaded inputs starts again; with grad on,
  // the offload counts too (an evaluation offloads nothing and keeps them).
  void begin(const c10::Device& device);
  // Layer i (in order, after begin) on h [B, S/P, hidden] -> {[B, S/P, hidden], what else the layer returns}.
  torch::autograd::variable_list operator()(std::int64_t i, const LayerForward& layer, const torch::Tensor& h);

  // Sharded: how the embeddings' and the head's units run (recomputed over their gathered weights, prefetching the
  // next ones).
  Recompute embeddings() const;
  Recompute head() const;
  bool sharded() const { return states_ != nullptr; }
  // Layer inputs the last forward copied to host memory, and those whose copy back the last backward issued ahead.
  const OffloadCounts& offloaded() const { return *counts_; }

 private:
  std::optional<OffloadedInput> offloaded_input(std::int64_t i);
  std::optional<GatheredUnits> gathered_layer(std::int64_t i) const;
  std::vector<int> units(std::int64_t i) const;   // layer i's unit; past the last layer, the head's units
  // Sharded: these units, prefetching those of layer `forward` in the forward and `backward` in the backward
  GatheredUnits gathered(std::vector<int> units, std::optional<std::int64_t> forward,
                         std::optional<std::int64_t> backward) const;

  ModelOptions options_;
  std::int64_t layers_;
  std::shared_ptr<OffloadCounts> counts_;     // of the last forward and backward
  std::shared_ptr<SideStream> copies_;        // checkpoint offload's copies, on the input's device
  std::shared_ptr<HostBuffers> host_memory_;  // and the memory of what they copy out
  std::shared_ptr<KeptInput> previous_;       // the layer before's offloaded input, in this forward
  std::shared_ptr<ShardedStates> states_;     // null: the modules' own parameters
  int embeddings_unit_ = -1;
  std::vector<int> layer_units_;              // per layer: its unit in states_
  std::vector<int> head_units_;
};

}  // namespace ulysses::model

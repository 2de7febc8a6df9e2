#include "model/layer_runner.hpp"

#include "core/error.hpp"

namespace ulysses::model {

LayerRunner::LayerRunner(const ModelOptions& options, std::int64_t layers)
    : options_(options), layers_(layers), counts_(std::make_shared<OffloadCounts>()) {
  ULY_CHECK(options.offload_checkpoints() == 0 || options.activation_checkpointing(),
            "checkpoint offload needs activation checkpointing");
}

void LayerRunner::use_states(std::shared_ptr<ShardedStates> states, int embeddings, std::vector<int> layers,
                             std::vector<int> head) {
  ULY_CHECK(static_cast<std::int64_t>(layers.size()) == layers_, "{} layer units for {} layers", layers.size(),
            layers_);
  states_ = std::move(states);
  embeddings_unit_ = embeddings;
  layer_units_ = std::move(layers);
  head_units_ = std::move(head);
}

void LayerRunner::begin(const c10::Device& device) {
  if (torch::GradMode::is_enabled()) {   // an evaluation offloads nothing (recompute.hpp) and keeps the counts
    counts_->bytes = 0;
    counts_->fetched_ahead = 0;
  }
  if (options_.offload_checkpoints() > 0 && (!copies_ || copies_->device() != device)) {
    copies_ = std::make_shared<SideStream>(device);
    host_memory_ = std::make_shared<HostBuffers>(HostBuffers::for_copies(device));
  }
  previous_ = nullptr;
}

torch::autograd::variable_list LayerRunner::operator()(std::int64_t i, const LayerForward& layer,
                                                       const torch::Tensor& h) {
  if (!states_ && !options_.activation_checkpointing()) return layer(h, {});   // plain
  Recompute recompute;
  recompute.precision = options_.precision();
  recompute.offload = offloaded_input(i);
  recompute.gathered = gathered_layer(i);
  const ChunkForward run = [layer](const Chunk&, const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
    return layer(x, w);
  };
  return recomputed(run, h, {}, recompute);   // {[B, S/P, hidden], ...}
}

std::optional<OffloadedInput> LayerRunner::offloaded_input(std::int64_t i) {
  auto kept = i < options_.offload_checkpoints() ? std::make_shared<KeptInput>() : nullptr;
  auto ahead = options_.prefetch() ? previous_ : nullptr;   // the layer before's, fetched by this one's backward
  previous_ = kept;
  if (!kept && !ahead) return std::nullopt;
  return OffloadedInput{kept, ahead, copies_, host_memory_, counts_};
}

std::vector<int> LayerRunner::units(std::int64_t i) const {
  if (i >= layers_) return head_units_;
  return {layer_units_[static_cast<std::size_t>(i)]};
}

GatheredUnits LayerRunner::gathered(std::vector<int> units, std::optional<std::int64_t> forward,
                                    std::optional<std::int64_t> backward) const {
  GatheredUnits g{states_, std::move(units)};
  if (options_.prefetch() && forward) g.prefetch_forward = this->units(*forward);
  if (options_.prefetch() && backward) g.prefetch_backward = this->units(*backward);
  return g;
}

std::optional<GatheredUnits> LayerRunner::gathered_layer(std::int64_t i) const {
  if (!states_) return std::nullopt;
  return gathered(units(i), i + 1, i > 0 ? std::optional<std::int64_t>(i - 1) : std::nullopt);
}

Recompute LayerRunner::embeddings() const {
  ULY_CHECK(states_ != nullptr, "the embeddings run as a unit only when sharded");
  Recompute r;
  r.precision = options_.precision();
  r.gathered = gathered({embeddings_unit_}, 0, std::nullopt);
  r.gathered->weights_in_backward = false;   // its backward scatters the output gradient into rows: the shape will do
  return r;
}

Recompute LayerRunner::head() const {
  ULY_CHECK(states_ != nullptr, "the head runs as a unit only when sharded");
  Recompute r;
  r.precision = options_.precision();
  r.gathered = gathered(head_units_, std::nullopt, layers_ - 1);
  return r;
}

}  // namespace ulysses::model

// ModelStates: what training updates on this rank — the weights, their gradients and AdamW's state — whether
// replicated (every rank holds every parameter: the modules' own, DDP style) or sharded (the model's
// ShardedStates: ZeRO-3 / FSDP), behind one interface for the step, the optimizer and checkpoints.
// The trained states are float32 in every precision. With LoRA only the adapters are trained states: the frozen
// base (parameters that do not require grad) is neither here nor in checkpoints, and under bf16 becomes bf16 in
// place. A replicated bf16 model (--precision bf16) computes with bf16
// copies: its modules' parameters become bf16 here and their fp32 masters are kept beside them (Megatron's
// Float16OptimizerWithFloat16Params); each backward's bf16 gradients are summed into the masters' fp32 ones
// (take_gradients) and the copies refreshed after every optimizer step or load.
//
//   take_gradients    after each backward (a no-op unless replicated bf16)
//   finish_gradients  after the step's last backward: the loss contract of grad_sync.hpp (gradient of
//                     Σ token losses / global count, identical on every rank that holds it)
//   clip, step        global-norm clipping (from the shards when sharded) and AdamW on what this rank holds
//   drop_gradients    instead of step (a skipped step): the weights and AdamW's state untouched
//   whole tensors     checkpoints see Hugging Face-named whole tensors in both modes: for_each_whole gathers
//                     them per unit when sharded (collective: every rank calls it); held says which elements
//                     of one this rank keeps, load_held takes just those (a rank reads only its part)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "model/causal_lm.hpp"
#include "train/adamw.hpp"

namespace ulysses::train {

class ModelStates {
 public:
  // grad_group: where replicated gradients are summed (SP × DP); the sharded model has its own groups.
  ModelStates(model::CausalLm model, comm::Communicator& grad_group, AdamWOptions adamw = {});

  // LoRA's frozen base (parameters that do not require grad) in the compute dtype, in place: bf16 under
  // --precision bf16 (replicated). The constructor does it; the trainer does it first, before the model moves to its
  // device, so that the device never holds the base in fp32.
  static void hold_frozen_in_compute_dtype(model::CausalLm& model);

  bool sharded() const { return model_->sharded_states() != nullptr; }
  comm::Communicator& grad_group() { return grad_group_; }

  void take_gradients();
  void finish_gradients(double global_count);
  double clip(double max_norm);   // torch's clip_grad_norm_ over the whole model; returns the norm before
  void step(double lr);           // AdamW, then the gradients are dropped
  void drop_gradients();          // nothing updated (step does this after AdamW; a non-finite step: finite_guard.hpp)
  // Every parameter's gradient, whole, in checkpoint order (collective when sharded; for tests and tools).
  std::vector<std::pair<std::string, torch::Tensor>> whole_gradients();

  enum class Part { kWeights, kOptimizer };
  struct Whole {
    std::string name;   // weights: Hugging Face names; optimizer: exp_avg.<name>, exp_avg_sq.<name>
    std::vector<std::int64_t> shape;
  };
  std::vector<Whole> whole_list(Part part) const;   // the order for_each_whole gives
  void for_each_whole(Part part, const std::function<void(const std::string&, const torch::Tensor&)>& fn);
  // The elements [first, first + count) of the whole tensor `name` (of whole_list) that this rank holds.
  std::pair<std::int64_t, std::int64_t> held(Part part, const std::string& name) const;
  void load_held(Part part, const std::string& name, const torch::Tensor& values);   // those elements, flat
  const std::shared_ptr<model::ShardedStates>& sharded_states() const { return model_->sharded_states(); }
  AdamW& optimizer() { return *optimizer_; }


 private:
  std::pair<std::string, bool> split_moment(const std::string& name) const;   // "exp_avg_sq.x" -> {"x", true}
  void refresh_copy(std::size_t i);   // replicated bf16: parameter i's bf16 copy from its master

  model::CausalLm model_;
  comm::Communicator& grad_group_;
  NamedTensors trained_;   // replicated: the parameters (or their fp32 masters); sharded: the master shards, by group
  std::vector<torch::Tensor> copies_;   // replicated bf16: the modules' bf16 parameters, as trained_ (else empty)
  std::unique_ptr<AdamW> optimizer_;
};

}  // namespace ulysses::train

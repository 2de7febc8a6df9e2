// AdamW with the exact update of torch.optim.AdamW (decoupled weight decay, bias correction, eps added
// after the square root), fp32 state. By default parameters with fewer than 2 dimensions (norm weights,
// biases) get no weight decay; flat shards (model/sharded_states.hpp) say per tensor. The update is
// elementwise, so a shard's update equals the same elements' update of the whole tensor bit for bit — and
// so does updating the tensors in batches of about kStepBatchElements, which bounds the update's temporary
// (the denominator) to a batch instead of a copy of every parameter. The state is a list of named tensors:
// "exp_avg.<name>", "exp_avg_sq.<name>", plus the step count.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace ulysses::train {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  static constexpr std::int64_t kStepBatchElements = std::int64_t{16} << 20;   // 64 MiB of fp32 temporaries

  AdamW(const NamedTensors& params, AdamWOptions options);                              // decay: dim >= 2
  AdamW(const NamedTensors& params, AdamWOptions options, const std::vector<bool>& decay);

  void step(double lr);            // uses each parameter's .grad(); skips parameters without one
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  // The moments of the tensor `name` (exp_avg, exp_avg_sq); BadInput-free: ULY_CHECK on an unknown name.
  std::pair<torch::Tensor, torch::Tensor> moments(const std::string& name) const;

  NamedTensors state() const;      // exp_avg.* and exp_avg_sq.*, in parameter order

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool decay;
  };
  void update(const std::vector<const Slot*>& slots, double lr) const;   // the foreach update of one batch

  AdamWOptions o_;
  std::vector<Slot> slots_;
  std::int64_t steps_ = 0;
};

}  // namespace ulysses::train

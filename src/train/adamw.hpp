// AdamW with the exact update of torch.optim.AdamW (decoupled weight decay, bias correction, eps added
// after the square root), fp32 state. Parameters with fewer than 2 dimensions (norm weights, biases) get
// no weight decay. The state is a list of named tensors so checkpoints store it by parameter name:
// "exp_avg.<param name>", "exp_avg_sq.<param name>", plus the step count.
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
  AdamW(const NamedTensors& params, AdamWOptions options);

  void step(double lr);            // uses each parameter's .grad(); skips parameters without one
  std::int64_t steps() const { return steps_; }

  NamedTensors state() const;      // exp_avg.* and exp_avg_sq.*, in parameter order
  // Copies every state tensor in (shapes must match) and sets the step count; BadInput naming a missing one.
  void load_state(const NamedTensors& state, std::int64_t steps, const std::string& where);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool decay;
  };
  AdamWOptions o_;
  std::vector<Slot> slots_;
  std::int64_t steps_ = 0;
};

}  // namespace ulysses::train

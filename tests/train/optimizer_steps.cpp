// The trainer's optimizer path as the step runs it — clip_grad_norm, then AdamW at Schedule::lr_at(step) —
// on parameters and per-step gradients read from a safetensors file; test_optimizer_vs_torch.py compares
// the result with torch.optim.AdamW, torch.nn.utils.clip_grad_norm_ and transformers' schedules.
//
// usage: optimizer_steps IN OUT STEPS PEAK MIN_RATIO WARMUP DECAY CLIP BETA1 BETA2 EPS WEIGHT_DECAY
//   IN:  "param.<name>" and "grad.<step>.<name>" for steps 1..STEPS (F32)
//   OUT: "param.<name>", "exp_avg.<name>", "exp_avg_sq.<name>" after the last step; "lr", "grad_norm" [STEPS] (F64)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../torch_tensors.hpp"
#include "train/adamw.hpp"
#include "train/grad_sync.hpp"
#include "train/schedule.hpp"

int main(int argc, char** argv) {
  using namespace ulysses;
  if (argc != 13) {
    std::fprintf(stderr, "usage: %s IN OUT STEPS PEAK MIN_RATIO WARMUP DECAY CLIP BETA1 BETA2 EPS WEIGHT_DECAY\n", argv[0]);
    return 2;
  }
  auto in = testing::read_tensors(argv[1]);
  const std::int64_t steps = std::atoll(argv[3]);
  const train::Schedule schedule{std::atof(argv[4]), std::atof(argv[5]), std::atoll(argv[6]), steps,
                                 train::decay_from_name(argv[7])};
  const double clip = std::atof(argv[8]);
  train::NamedTensors params;
  std::vector<torch::Tensor> list;
  for (auto& [key, t] : in)
    if (key.starts_with("param.")) {
      params.emplace_back(key.substr(6), t.requires_grad_(true));
      list.push_back(t);
    }
  train::AdamW opt(params, {std::atof(argv[9]), std::atof(argv[10]), std::atof(argv[11]), std::atof(argv[12])});
  torch::Tensor lr = torch::empty({steps}, torch::kDouble), norm = torch::empty({steps}, torch::kDouble);
  for (std::int64_t s = 1; s <= steps; ++s) {
    for (auto& [name, p] : params) p.mutable_grad() = in.at("grad." + std::to_string(s) + "." + name).clone();
    norm[s - 1] = train::clip_grad_norm(list, clip);
    lr[s - 1] = schedule.lr_at(s);
    opt.step(schedule.lr_at(s));
  }
  std::map<std::string, torch::Tensor> out{{"lr", lr}, {"grad_norm", norm}};
  for (auto& [name, p] : params) out["param." + name] = p.detach();
  for (auto& [name, t] : opt.state()) out[name] = t;
  testing::write_tensors(argv[2], out);
  return 0;
}

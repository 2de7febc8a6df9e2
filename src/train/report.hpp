// What the trainer tells the user: the rank map, the memory plan, the per-step line and the JSONL metrics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"
#include "model/config.hpp"

namespace ulysses::train {

// "rank 3: host n1, sp_rank 1 of group [2 3], dp_rank 1 of group [1 3]" — one line per rank (rank 0 prints).
std::vector<std::string> rank_map_lines(const RankLayout& layout, const std::vector<std::string>& hosts);

struct MemoryPlan {
  double weights_gib = 0, grads_gib = 0, optimizer_gib = 0, activations_gib = 0;
  double total() const { return weights_gib + grads_gib + optimizer_gib + activations_gib; }
};
// fp32 weights, grads and two AdamW moments; activations of one micro-batch on one rank (S/P tokens per
// sequence, plus the CPU attention's [H/P, S, S] scores per layer).
MemoryPlan estimate_memory(const model::ModelConfig& c, std::int64_t params, std::int64_t micro_batch,
                           std::int64_t seq_len, std::int64_t sp);

// Model FLOPs of one step over all ranks: 6·N·T + 12·layers·H·D·S·T (T = tokens in the step).
double step_flops(const model::ModelConfig& c, std::int64_t params, double tokens, std::int64_t seq_len);

double peak_rss_mib();   // this process, from getrusage

struct StepReport {
  std::int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0, tokens_per_s = 0, tflops = 0, peak_mib = 0;
  std::int64_t tokens = 0;
};

class Metrics {
 public:
  explicit Metrics(const std::filesystem::path& jsonl);   // appends (a resumed run continues the file)
  void write(const StepReport& r);

 private:
  std::ofstream out_;
};

std::string step_line(const StepReport& r);

}  // namespace ulysses::train

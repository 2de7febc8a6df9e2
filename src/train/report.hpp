// What the trainer tells the user: the rank map, the per-step line and the JSONL metrics (the memory plan:
// plan/plan_report).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "core/topology.hpp"
#include "io/tensorboard.hpp"

namespace ulysses::train {

// One line per rank (rank 0 prints): where it runs and which groups it is in. Groups longer than 8 ranks
// are shortened to "[first second third ... last]". on_gpu: each rank's GPU (its local rank), else "cpu".
//   rank    3: host n2, node 1, local rank 1, gpu 1, island 1, sp_rank 1 of sp group [2 3], dp_rank 1 of dp group [1 3]
std::vector<std::string> rank_map_lines(const RankLayout& layout, const Topology& topo, bool on_gpu);
constexpr int kFullRankMapUpTo = 64;   // a real run prints the map up to this many ranks; --dry-run always

// "world 4 ranks (SLURM_NTASKS 4) = sp 2 × dp 2 on 2 nodes; 2 NVLink islands of 2 ranks; SP groups inside islands",
// with " (measured from the GPU fabric)" after the island size when the GPUs reported it (Topology::measure_islands)
std::string topology_line(const RankLayout& layout, const Topology& topo, const char* slurm_ntasks);

double peak_rss_mib();   // this process, from getrusage

struct StepReport {
  std::int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0, tokens_per_s = 0;
  double tflops = 0;                     // model TFLOPS of the whole job (all ranks)
  double tflops_per_device = 0;          // tflops / ranks
  std::optional<double> mfu;             // tflops_per_device / peak per device, when a peak is known
  std::optional<double> aux_loss;        // MoE: the load-balancing loss before its coefficient (train/step.hpp)
  double peak_mib = 0;                   // host resident set, max over ranks
  std::optional<double> peak_gpu_mib;    // PyTorch's CUDA allocations, max over ranks (CUDA runs)
  std::int64_t tokens = 0;              // target tokens: labels that count in the loss (valid, not -100), all ranks
  std::optional<double> eta_seconds;     // the remaining steps at this run's mean step time (the step line only)
  bool nonfinite = false;                // the loss or the gradient norm was NaN or infinite: nothing was updated
};

// metrics.jsonl, and the same numbers as TensorBoard scalars when given a folder: every field of a line but
// "step" under the tag train/<field>, eval lines' eval_<x> under eval/<x> (eval/loss, eval/ppl, eval/tokens).
class Metrics {
 public:
  // Appends. A run resumed from step `resumed_step` (0: a fresh start) first drops the lines after it (steps a
  // killed run wrote after its last checkpoint, which this run writes again), so every step appears once; its
  // TensorBoard file tells TensorBoard to drop them too. A metrics.jsonl or TensorBoard file that cannot be written
  // (a full disk) is a warning on the log and no more lines or events there, never the end of the run.
  Metrics(const std::filesystem::path& jsonl, std::int64_t resumed_step,
          const std::optional<std::filesystem::path>& tensorboard);
  void write(const StepReport& r);
  void write_eval(std::int64_t step, double loss, double tokens);   // {"step", "eval_loss", "eval_ppl", "eval_tokens"}

 private:
  void write_line(const nlohmann::json& line);
  void events_off(const BadInput& e);

  std::filesystem::path jsonl_;
  std::ofstream out_;   // closed once a write failed
  std::optional<tensorboard::EventWriter> events_;
};

std::string step_line(const StepReport& r);

}  // namespace ulysses::train

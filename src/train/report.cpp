#include "train/report.hpp"

#include <algorithm>

#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ulysses::train {

namespace {

std::string group_text(const std::vector<int>& v) {
  if (v.size() <= 8) return fmt::format("[{}]", fmt::join(v, " "));
  return fmt::format("[{} {} {} ... {}]", v[0], v[1], v[2], v.back());
}

}  // namespace

std::vector<std::string> rank_map_lines(const RankLayout& l, const Topology& topo) {
  std::vector<std::string> lines;
  for (int g = 0; g < l.world(); ++g) {
    const RankPlace& p = topo.place(g);
    lines.push_back(fmt::format("rank {:>4}: host {}, node {}, local rank {}, gpu {}, island {}, sp_rank {} of sp group {}, "
                                "dp_rank {} of dp group {}", g, p.host, p.node, p.local_rank, p.local_rank, p.island,
                                l.sp_rank(g), group_text(l.sp_group_of(g)), l.dp_rank(g), group_text(l.dp_group_of(g))));
  }
  return lines;
}

std::string topology_line(const RankLayout& l, const Topology& topo, const char* slurm_ntasks) {
  const bool inside = sp_group_crossing_islands(l, topo).empty();
  return fmt::format("world {} ranks{} = sp {} × dp {} on {} node{}; {} NVLink island{} of {} ranks; SP groups {}", l.world(),
                     slurm_ntasks != nullptr ? fmt::format(" (SLURM_NTASKS {})", slurm_ntasks) : "", l.sp(), l.dp(),
                     topo.num_nodes(), topo.num_nodes() == 1 ? "" : "s", topo.num_islands(),
                     topo.num_islands() == 1 ? "" : "s", topo.island_ranks(),
                     inside ? "inside islands" : "CROSS islands (--allow-sp-across-islands)");
}

MemoryPlan estimate_memory(const arch::ModelConfig& c, std::int64_t micro_batch, std::int64_t seq_len,
                           const SequenceParallel& sp, const model::ModelOptions& options, const StateBytes& states,
                           bool sharded) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  const bool bf16 = options.precision() == model::Precision::kBf16;
  const std::int64_t logits_chunk_tokens = options.logits_chunk_tokens();
  const auto params = static_cast<double>(arch::parameter_count(c));
  // sharded: one unit whole (a layer in the compute dtype, or the fp32 embedding table) and its gradient
  const double unit = std::max((bf16 ? 2.0 : 4.0) * static_cast<double>(arch::layer_parameter_count(c)),
                               4.0 * static_cast<double>(c.vocab_size * c.hidden_size));
  const double extra = sharded ? 2 * unit : bf16 ? 2 * params : 0;   // replicated bf16: autocast's weight copies
  MemoryPlan m;
  m.weights_gib = (static_cast<double>(states.weights) + extra) / kGiB;
  m.grads_gib = static_cast<double>(states.grads) / kGiB;
  m.optimizer_gib = static_cast<double>(states.optimizer) / kGiB;
  const double tokens = static_cast<double>(micro_batch * sp.slice(seq_len, "the dataset's seq_len").size());
  const double h = static_cast<double>(c.hidden_size), qkv = static_cast<double>((c.num_heads + 2 * c.num_kv_heads) * c.head_dim);
  const double attn_out = static_cast<double>(c.num_heads * c.head_dim), inter = static_cast<double>(c.intermediate_size);
  // saved per token per layer: 2 norms + residual (3h), q/k/v (+ after RoPE), attention output, o_proj; and the
  // MLP's gate/up/act for every token, or for one tile with TiledMLP
  const double per_token_layer = 3 * h + 2 * qkv + 2 * attn_out + h;
  const auto tile = static_cast<double>(options.mlp_tile_tokens());
  const double mlp_rows = tile > 0 ? std::min(tokens, tile) : tokens;
  // Attention runs per document through fused SDPA (no [S, S] scores), except with a sliding window, which
  // needs the [B, 1, S, S] bool mask and the scores of H/P heads.
  const double scores = !c.sliding_window ? 0.0
                        : static_cast<double>(micro_batch) * static_cast<double>(arch::ulysses_heads(c, sp.degree()).q) *
                              static_cast<double>(seq_len) * static_cast<double>(seq_len) * 1.25;   // fp32 probs + mask
  const double logit_rows = logits_chunk_tokens > 0 ? std::min(tokens, static_cast<double>(logits_chunk_tokens)) : tokens;
  const double logits = 4.0 * logit_rows * static_cast<double>(c.vocab_size) * 2;   // fp32 logits and their softmax
  const double bytes = bf16 ? 2.0 : 4.0;                                        // saved activations
  const double layer = bytes * (tokens * per_token_layer + mlp_rows * 3 * inter + scores);   // one layer's
  const double layers = options.activation_checkpointing()
                            ? static_cast<double>(c.num_layers) * 4.0 * tokens * h + layer   // fp32 inputs + one layer
                            : static_cast<double>(c.num_layers) * layer;
  m.activations_gib = (layers + logits) / kGiB;
  return m;
}

double step_flops(const arch::ModelConfig& c, double tokens, std::int64_t seq_len) {
  return 6.0 * static_cast<double>(arch::matmul_parameter_count(c)) * tokens +
         12.0 * static_cast<double>(c.num_layers * c.num_heads * c.head_dim) * static_cast<double>(seq_len) * tokens;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

Metrics::Metrics(const std::filesystem::path& jsonl) : out_(jsonl, std::ios::app) {
  if (!out_) throw BadInput(fmt::format("cannot write metrics file {}", jsonl.string()));
}

void Metrics::write(const StepReport& r) {
  nlohmann::json j = {{"step", r.step},           {"loss", r.loss},     {"lr", r.lr},
                      {"grad_norm", r.grad_norm}, {"tokens", r.tokens}, {"seconds", r.seconds},
                      {"tokens_per_s", r.tokens_per_s}, {"tflops", r.tflops},
                      {"tflops_per_device", r.tflops_per_device}, {"peak_rss_mib", r.peak_mib}};
  if (r.mfu) j["mfu"] = *r.mfu;
  if (r.peak_gpu_mib) j["peak_gpu_mib"] = *r.peak_gpu_mib;
  out_ << j.dump() << "\n";
  out_.flush();
}

std::string step_line(const StepReport& r) {
  std::string line = fmt::format("step {:>5}/{} | loss {:.4f} | lr {:.3e} | grad {:.3f} | {:.0f} tok/s | {:.3f} TFLOPS/device",
                                 r.step, r.steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.tflops_per_device);
  if (r.mfu) line += fmt::format(" | MFU {:.1f}%", 100 * *r.mfu);
  if (r.peak_gpu_mib) line += fmt::format(" | peak GPU {:.0f} MiB", *r.peak_gpu_mib);
  return line + fmt::format(" | peak RSS {:.0f} MiB", r.peak_mib);
}

}  // namespace ulysses::train

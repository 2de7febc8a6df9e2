#include "train/report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/replace_file.hpp"

namespace ulysses::train {

namespace {

constexpr const char* kRunDirHint = "check that the run directory is writable and has free space";

std::string group_text(const std::vector<int>& v) {
  if (v.size() <= 8) return fmt::format("[{}]", fmt::join(v, " "));
  return fmt::format("[{} {} {} ... {}]", v[0], v[1], v[2], v.back());
}

}  // namespace

std::vector<std::string> rank_map_lines(const RankLayout& l, const Topology& topo, bool on_gpu) {
  std::vector<std::string> lines;
  for (int g = 0; g < l.world(); ++g) {
    const RankPlace& p = topo.place(g);
    const std::string ring =
        l.ring() == 1 ? "" : fmt::format(" (ulysses_rank {} of ulysses group {}, ring_rank {} of ring {})",
                                         l.ulysses_rank(g), group_text(l.ulysses_group_of(g)), l.ring_rank(g),
                                         group_text(l.ring_group_of(g)));
    const std::string device = on_gpu ? fmt::format("gpu {}", p.local_rank) : "cpu";
    lines.push_back(fmt::format("rank {:>4}: host {}, node {}, local rank {}, {}, island {}, sp_rank {} of sp group "
                                "{}{}, dp_rank {} of dp group {}", g, p.host, p.node, p.local_rank, device,
                                p.island, l.sp_rank(g), group_text(l.sp_group_of(g)), ring, l.dp_rank(g),
                                group_text(l.dp_group_of(g))));
  }
  return lines;
}

std::string topology_line(const RankLayout& l, const Topology& topo, const char* slurm_ntasks) {
  const bool inside = sp_group_crossing_islands(l, topo).empty();
  return fmt::format("world {} ranks{} = sp {}{} × dp {} on {} node{}; {} NVLink island{} of {} ranks{}; {} groups {}",
                     l.world(), slurm_ntasks != nullptr ? fmt::format(" (SLURM_NTASKS {})", slurm_ntasks) : "", l.sp(),
                     l.ring() == 1 ? "" : fmt::format(" (ulysses {} × ring {})", l.ulysses(), l.ring()), l.dp(),
                     topo.num_nodes(), topo.num_nodes() == 1 ? "" : "s", topo.num_islands(),
                     topo.num_islands() == 1 ? "" : "s", topo.island_ranks(),
                     topo.islands_measured() ? " (measured from the GPU fabric)" : "", l.ring() == 1 ? "SP" : "Ulysses",
                     inside ? "inside islands" : "CROSS islands (--allow-sp-across-islands)");
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

namespace {

// Keeps the lines of `jsonl` up to step `last` (write + rename: a crash leaves the old file or the new one).
void truncate_after(const std::filesystem::path& jsonl, std::int64_t last) {
  std::ifstream in(jsonl);
  if (!in) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<std::int64_t>() <= last)
      kept += line + "\n";
  }
  if (const std::string why = replace_file(jsonl, kept); !why.empty())
    throw BadInput(fmt::format("cannot rewrite metrics file {}: {}", jsonl.string(), why), kRunDirHint);
}

std::string duration(double seconds) {   // "3h02m", "4m10s", "12s"
  const auto s = static_cast<std::int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

Metrics::Metrics(const std::filesystem::path& jsonl, std::int64_t resumed_step,
                 const std::optional<std::filesystem::path>& tensorboard)
    : jsonl_(jsonl) {
  truncate_after(jsonl, resumed_step);
  out_.open(jsonl, std::ios::app);
  if (!out_) throw BadInput(fmt::format("cannot write metrics file {}", jsonl.string()),
                            kRunDirHint);
  if (!tensorboard) return;
  try {   // this run logs from the step after its checkpoint: what earlier files logged from there on is stale
    events_.emplace(*tensorboard, resumed_step + 1);
  } catch (const BadInput& e) {
    events_off(e);
  }
}

void Metrics::events_off(const BadInput& e) {   // TensorBoard is a view: losing it must not lose the run
  log_info("warning: TensorBoard events off for the rest of this run: {}", one_line(e));
  events_.reset();
}

void Metrics::write_line(const nlohmann::json& line) {
  if (out_.is_open()) {
    errno = 0;
    out_ << line.dump() << "\n";
    out_.flush();
    if (!out_) {   // the run goes on: its log has the steps, its checkpoints the states
      log_info("warning: {} lines off for the rest of this run: writing step {} failed ({}) — HINT: {}", jsonl_.string(),
               line["step"].dump(), errno != 0 ? std::strerror(errno) : "an I/O error", kRunDirHint);
      out_.close();
    }
  }
  if (!events_) return;
  std::vector<std::pair<std::string, double>> scalars;
  for (const auto& [key, value] : line.items()) {
    if (key == "step" || !value.is_number()) continue;   // "nonfinite": true is the JSON line's alone
    scalars.emplace_back(key.starts_with("eval_") ? "eval/" + key.substr(5) : "train/" + key, value.get<double>());
  }
  try {
    events_->add(line["step"].get<std::int64_t>(), scalars);
  } catch (const BadInput& e) {
    events_off(e);
  }
}

void Metrics::write(const StepReport& r) {
  nlohmann::json j = {{"step", r.step},           {"loss", r.loss},     {"lr", r.lr},
                      {"grad_norm", r.grad_norm}, {"tokens", r.tokens}, {"seconds", r.seconds},
                      {"tokens_per_s", r.tokens_per_s}, {"tflops", r.tflops},
                      {"tflops_per_device", r.tflops_per_device}, {"peak_rss_mib", r.peak_mib}};
  if (r.mfu) j["mfu"] = *r.mfu;
  if (r.aux_loss) j["aux_loss"] = *r.aux_loss;
  if (r.peak_gpu_mib) j["peak_gpu_mib"] = *r.peak_gpu_mib;
  if (r.nonfinite) j["nonfinite"] = true;   // its loss or grad_norm is null: nothing was updated
  write_line(j);
}

void Metrics::write_eval(std::int64_t step, double loss, double tokens) {
  write_line({{"step", step}, {"eval_loss", loss}, {"eval_ppl", std::exp(loss)}, {"eval_tokens", tokens}});
}

// Three significant digits in a unit that shows them: a GPU's hundreds of TFLOPS, a CPU's GFLOPS (once "0.000 TFLOPS").
std::string flops_text(double tflops) {
  if (tflops >= 1) return fmt::format("{:.1f} TFLOPS", tflops);
  if (tflops >= 1e-3) return fmt::format("{:.3g} GFLOPS", tflops * 1e3);
  return fmt::format("{:.3g} MFLOPS", tflops * 1e6);
}

std::string step_line(const StepReport& r) {
  std::string line = fmt::format("step {:>5}/{} | loss {:.4f} | lr {:.3e} | grad {:.3f} | {:.0f} tok/s | {}/device",
                                 r.step, r.steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s,
                                 flops_text(r.tflops_per_device));
  if (r.aux_loss) line.insert(line.find(" | lr "), fmt::format(" | aux {:.4f}", *r.aux_loss));
  if (r.mfu) line += fmt::format(" | MFU {:.1f}%", 100 * *r.mfu);
  if (r.peak_gpu_mib) line += fmt::format(" | peak GPU {:.0f} MiB", *r.peak_gpu_mib);
  line += fmt::format(" | peak RSS {:.0f} MiB", r.peak_mib);
  if (r.eta_seconds) line += " | ETA " + duration(*r.eta_seconds);
  if (r.nonfinite) line += " | non-finite: not applied";
  return line;
}

}  // namespace ulysses::train

// merge: check everything (manifest, checksums, shapes against the config, optimizer against the weights,
// trainer state), then stream the tensors bit for bit, whole, into a new checkpoint whose manifest says
// consolidated and replicated. A sharded checkpoint's tensors are gathered from its per-rank files one piece
// at a time on the way (ckpt/source.hpp); open_checkpoint refuses the layouts this build does not know.
#include "ckpt/commands.hpp"
#include "ckpt/output.hpp"
#include "ckpt/source.hpp"
#include "core/log.hpp"
#include "core/output_dir.hpp"
#include "core/progress.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {
namespace {

std::vector<OutTensor> same_tensors(const Weights& w) {
  std::vector<OutTensor> out;
  for (const std::string& n : w.names()) out.push_back({n, n, w.info(n).shape, w.info(n).dtype});
  return out;
}

}  // namespace

int run_merge(const MergeOptions& o) {
  const Checkpoint c = open_checkpoint(o.input);
  const auto model = same_tensors(c.model), optimizer = same_tensors(c.optimizer);
  log_info("{}: step {}, written at world {} = sp {} x dp {}, optimizer {}; {} weights, {} optimizer tensors, checksums ok",
           c.dir.string(), c.manifest.step, c.manifest.world, c.manifest.sp, c.manifest.dp, c.manifest.optimizer_layout,
           model.size(), optimizer.size());
  const std::uint64_t bytes = safetensors_bytes(model) + safetensors_bytes(optimizer) +
                              fs::file_size(c.dir / checkpoint::kTrainerState) + fs::file_size(c.dir / checkpoint::kConfig);
  log_info("plan: {} -> {} ({}: model.safetensors, optimizer.safetensors, trainer_state.json, config.json, manifest.json)",
           c.dir.string(), o.output.string(), human_bytes(bytes));
  if (o.dry_run) return end_dry_run();
  OutputDir out(o.output, o.overwrite);
  require_free_space(o.output, bytes);
  Progress progress("merge", model.size() + optimizer.size(), "tensors", "bytes");
  const auto model_sums = write_tensors(out.tmp() / checkpoint::kModel, c.model, model, c.model.metadata(), &progress,
                                         o.allow_nonfinite);
  const auto opt_sums =
      write_tensors(out.tmp() / checkpoint::kOptimizer, c.optimizer, optimizer, c.optimizer.metadata(), &progress, o.allow_nonfinite);
  progress.finish();
  copy_file_checked(c.dir / checkpoint::kTrainerState, out.tmp() / checkpoint::kTrainerState);
  copy_file_checked(c.dir / checkpoint::kConfig, out.tmp() / checkpoint::kConfig);
  verify_tensors(out.tmp() / checkpoint::kModel, model, model_sums);
  verify_tensors(out.tmp() / checkpoint::kOptimizer, optimizer, opt_sums);
  checkpoint::Manifest m = c.manifest;
  m.consolidated = true;
  m.optimizer_layout = checkpoint::kOptimizerReplicated;
  m.shards = nullptr;
  m.files.clear();
  for (const char* f : {checkpoint::kModel, checkpoint::kOptimizer, checkpoint::kTrainerState, checkpoint::kConfig})
    m.files.push_back(checkpoint::file_entry(out.tmp(), f));
  checkpoint::write_manifest(m, out.tmp());
  out.commit();
  log_info("wrote consolidated checkpoint {} (step {}); resume it at any SP x DP layout with ulysses-train --resume {}",
           o.output.string(), m.step, o.output.string());
  return 0;
}

}  // namespace ulysses::ckpt

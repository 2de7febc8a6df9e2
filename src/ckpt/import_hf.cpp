// import-hf: a Hugging Face directory (single or sharded; F32, BF16 or F16) → a step-0000000 checkpoint:
// fp32 weights, a zero AdamW state (steps 0), trainer state step 0 / cursor 0, the config.json. The
// trainer resumes it like any checkpoint (ulysses-train --resume DIR --model-config DIR/config.json).
#include <nlohmann/json.hpp>

#include "ckpt/commands.hpp"
#include "ckpt/output.hpp"
#include "ckpt/source.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_dir.hpp"
#include "core/progress.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {

int run_import_hf(const ImportOptions& o) {
  if (!fs::is_directory(o.input))
    throw BadInput(fmt::format("{} is not a directory", o.input.string()),
                   "pass a Hugging Face model directory (config.json + *.safetensors)");
  const arch::ModelConfigFile spec = arch::read_model_config_file(o.input / "config.json");
  const Weights hf = Weights::hf_dir(o.input);
  check_parameters(hf, spec, /*f32_only=*/false, /*allow_ignorable=*/true);
  std::vector<OutTensor> model, optimizer;
  const std::vector<arch::ParameterSpec> params = arch::parameters(spec.config);
  for (const arch::ParameterSpec& t : params) model.push_back({t.name, t.name, t.shape, st::DType::kF32});
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."})
    for (const arch::ParameterSpec& t : params) optimizer.push_back({prefix + t.name, "", t.shape, st::DType::kF32});
  for (const std::string& n : hf.names())
    if (ignorable_extra(spec.config, n)) log_info("skipping {} ({})", n, n == "lm_head.weight" ? "tied to the embeddings" : "a buffer");
  const std::uint64_t bytes = safetensors_bytes(model) + safetensors_bytes(optimizer);
  log_info("{}: {} ({} tensors) -> checkpoint {} at step 0 ({}, fp32 + zero AdamW state)", o.input.string(),
           spec.config.architecture, model.size(), o.output.string(), human_bytes(bytes));
  if (o.dry_run) return end_dry_run();

  OutputDir out(o.output, o.overwrite);
  require_free_space(o.output, bytes);
  Progress progress("import", model.size() + optimizer.size(), "tensors", "bytes");
  const auto model_sums = write_tensors(out.tmp() / checkpoint::kModel, hf, model, {{"format", "pt"}}, &progress,
                                         /*allow_nonfinite=*/true);
  const auto opt_sums = write_tensors(out.tmp() / checkpoint::kOptimizer, hf, optimizer, {{"steps", "0"}}, &progress,
                                       /*allow_nonfinite=*/true);
  progress.finish();
  const nlohmann::json state = {{"step", 0}, {"cursor", 0}, {"tokens_seen", 0},
                                {"options", {{"imported_from", fs::absolute(o.input).string()}}}};
  write_text(out.tmp() / checkpoint::kTrainerState, state.dump(2) + "\n");
  copy_file_checked(o.input / "config.json", out.tmp() / checkpoint::kConfig);
  verify_tensors(out.tmp() / checkpoint::kModel, model, model_sums);
  verify_tensors(out.tmp() / checkpoint::kOptimizer, optimizer, opt_sums);
  checkpoint::Manifest m;
  m.architecture = spec.config.architecture;
  m.consolidated = true;
  for (const char* f : {checkpoint::kModel, checkpoint::kOptimizer, checkpoint::kTrainerState, checkpoint::kConfig})
    m.files.push_back(checkpoint::file_entry(out.tmp(), f));
  checkpoint::write_manifest(m, out.tmp());
  out.commit();
  log_info("wrote {}; train from it with ulysses-train --resume {} --model-config {}/config.json", o.output.string(),
           o.output.string(), o.output.string());
  return 0;
}

}  // namespace ulysses::ckpt

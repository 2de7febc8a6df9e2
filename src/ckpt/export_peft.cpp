// export-peft: a LoRA checkpoint → the adapter directory PEFT's save_pretrained writes: adapter_model.safetensors
// (its keys base_model.model.<name>, as get_peft_model_state_dict names them: the model's own name with the adapter
// name dropped) and adapter_config.json (LoraConfig: r, lora_alpha, target_modules, use_rslora, the base). Tensors
// stream as export-hf's do and are read back and compared before the directory is renamed into place.

#include "ckpt/commands.hpp"
#include "ckpt/dtype.hpp"
#include "ckpt/output.hpp"
#include "ckpt/source.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {

inline constexpr const char* kPeftPrefix = "base_model.model.";

int run_export_peft(const ExportPeftOptions& o) {
  const st::DType dtype = dtype_from_flag(o.dtype);
  const Checkpoint c = open_checkpoint(o.input, Verify::kNone);
  if (!c.lora)
    throw BadInput(fmt::format("{} is a full fine-tune's checkpoint; export-peft writes LoRA adapters (ulysses-train "
                               "--lora-rank)", c.dir.string()),
                   "export-hf writes a full fine-tune's model");
  std::string base = o.base.empty() ? c.lora->init_from : o.base;   // a folder found from here: its absolute path
  if (!base.empty() && fs::is_directory(base)) base = fs::absolute(base).lexically_normal().string();
  const ExportTensors out = export_tensors(c.model, c.model.names(), dtype, kPeftPrefix);   // clang 14: no captured bindings
  const std::vector<OutTensor>& tensors = out.tensors;
  const std::uint64_t total = out.total;
  log_info("{}: step {}, {} LoRA {} ({} tensors) -> {} {}, base {}", c.dir.string(), c.manifest.step,
           c.spec.config.architecture, c.lora->summary(), tensors.size(), human_bytes(total), st::dtype_name(dtype),
           base.empty() ? "none recorded" : base);
  if (base.empty())
    log_info("note: the run trained its adapters over a base made from --seed (no --init-from): "
             "adapter_config.json names no base_model_name_or_path (--base NAME sets one)");
  if (o.dry_run) return end_dry_run();

  write_export(o.output, o.overwrite, c, tensors, "export-peft", [&](const fs::path& tmp, Progress& progress) {
    const fs::path file = tmp / "adapter_model.safetensors";
    const auto sums = write_tensors(file, c.model, tensors, {{"format", "pt"}}, &progress, o.allow_nonfinite);
    progress.finish();
    write_text(tmp / "adapter_config.json", peft_adapter_config(*c.lora, base).dump(2) + "\n");
    verify_tensors(file, tensors, sums);
  });
  log_info("wrote {} ({} {} adapters, verified); load it with peft.PeftModel.from_pretrained(base_model, \"{}\")",
           o.output.string(), human_bytes(total), st::dtype_name(dtype), o.output.string());
  return 0;
}

}  // namespace ulysses::ckpt

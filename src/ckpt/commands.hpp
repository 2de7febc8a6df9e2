// ulysses-ckpt's subcommands: one options struct and one run_X each (main.cpp fills the structs from
// the command line; tests call run_X directly). Each returns the process exit code; bad input throws
// BadInput (exit 2) before any output exists.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ulysses::ckpt {

// A checkpoint (any layout it was written with) → one consolidated checkpoint, tensors bit for bit.
struct MergeOptions {
  std::filesystem::path input, output;
  bool overwrite = false, dry_run = false;
  bool allow_nonfinite = false;   // write NaN/inf tensors (refused by default: a diverged run's checkpoint)
};
int run_merge(const MergeOptions& o);

// A checkpoint → a Hugging Face model directory (safetensors in --dtype, config, generation config). A LoRA
// checkpoint only with merge_lora: its adapters merged into the base (`base`, else the run's --init-from).
struct ExportOptions {
  std::filesystem::path input, output, tokenizer;
  std::string dtype = "bf16";                          // bf16 | fp16 | fp32
  std::uint64_t max_shard_bytes = 5'000'000'000;       // 5GB, as transformers' default
  bool merge_lora = false;
  std::filesystem::path base;
  bool overwrite = false, dry_run = false;
  bool allow_nonfinite = false;   // as merge's
};
int run_export_hf(const ExportOptions& o);

// A LoRA checkpoint → a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) that
// peft.PeftModel.from_pretrained loads over the base; base_model_name_or_path: `base`, else the run's --init-from.
struct ExportPeftOptions {
  std::filesystem::path input, output;
  std::string base;
  std::string dtype = "fp32";   // the adapters' masters are fp32; bf16 | fp16 halve a small file
  bool overwrite = false, dry_run = false;
  bool allow_nonfinite = false;   // as merge's
};
int run_export_peft(const ExportPeftOptions& o);

// A Hugging Face model directory → a step-0000000 checkpoint (fp32, zero optimizer state).
struct ImportOptions {
  std::filesystem::path input, output;
  bool overwrite = false, dry_run = false;
};
int run_import_hf(const ImportOptions& o);

// Prints what a checkpoint / HF directory / .safetensors file holds; exit 1 if a checksum disagrees.
struct InspectOptions {
  std::filesystem::path path;
  bool tensors = true;       // list every tensor
  bool checksums = true;     // hash the files (checkpoints: against the manifest)
};
int run_inspect(const InspectOptions& o);

// Compares two weight sets in fp32; exit 1 when a tensor differs by more than the tolerance or the sets differ.
struct DiffOptions {
  std::filesystem::path a, b;
  double tolerance = 0;      // max |a - b| allowed per element
  bool optimizer = false;    // two checkpoints: compare the optimizer state too
};
int run_diff(const DiffOptions& o);

}  // namespace ulysses::ckpt

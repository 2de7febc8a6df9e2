// ulysses-ckpt: checkpoints of ulysses-train ↔ Hugging Face, torch-free (merge, export-hf, export-peft,
// import-hf, inspect, diff). One set_up_X per subcommand fills an options struct; run_X (commands.hpp) does the work.
// Exit codes: 0 ok, 1 a difference (diff) / a checksum mismatch (inspect) / an I/O failure, 2 bad input.
#include <CLI/CLI.hpp>

#include <cstring>

#include "ckpt/commands.hpp"
#include "ckpt/output.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/main_guard.hpp"

namespace uc = ulysses::ckpt;

namespace {

struct CliState {
  uc::MergeOptions merge;
  uc::ExportOptions export_hf;
  uc::ExportPeftOptions export_peft;
  std::string max_shard_size = "5GB";
  uc::ImportOptions import_hf;
  uc::InspectOptions inspect;
  bool no_tensors = false, no_checksums = false;
  uc::DiffOptions diff;
};

void output_flags(CLI::App* cmd, std::filesystem::path& output, bool& overwrite, bool& dry_run) {
  cmd->add_option("-o,--output", output, "Output directory (written to a temporary name, renamed when complete)")
      ->required();
  cmd->add_flag("--overwrite", overwrite, "Replace an existing output directory");
  cmd->add_flag("--dry-run", dry_run, "Check the input and print the plan; write nothing");
}

void nonfinite_flag(CLI::App* cmd, bool& allow) {
  cmd->add_flag("--allow-nonfinite", allow, "Write tensors that hold NaN or infinite values (refused by default: the "
                                            "checkpoint of a diverged run, or values the dtype cannot hold)");
}

void set_up_merge(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("merge", "Check a checkpoint and write it consolidated (any SP x DP layout in)");
  cmd->footer(R"(
Examples:
  # the newest checkpoint of a run (follows checkpoints/latest) -> one consolidated checkpoint
  ulysses-ckpt merge runs/llama-1m/checkpoints -o llama-1m-final
  # a given step; then resume at another layout
  ulysses-ckpt merge runs/llama-1m/checkpoints/step-0002000 -o merged
  mpiexec -n 8 ulysses-train --resume merged --model-config merged/config.json --sp 8 ...)");
  cmd->add_option("checkpoint", st.merge.input, "A step-NNNNNNN directory, a run's checkpoints/ or the run directory")
      ->required();
  output_flags(cmd, st.merge.output, st.merge.overwrite, st.merge.dry_run);
  nonfinite_flag(cmd, st.merge.allow_nonfinite);
}

void set_up_export(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("export-hf", "Write a Hugging Face model directory (safetensors + config.json)");
  cmd->footer(R"(
Examples:
  # bf16 weights, tokenizer copied, ready for from_pretrained / huggingface-cli upload
  ulysses-ckpt export-hf runs/llama-1m/checkpoints -o llama-1m-hf --tokenizer meta-llama-3.1-8b/
  # fp32, sharded above 2 GiB per file
  ulysses-ckpt export-hf runs/llama-1m/checkpoints/step-0002000 -o hf-fp32 --dtype fp32 --max-shard-size 2GiB
  # a LoRA run: its adapters merged into the base it trained over (the run's --init-from, or --base DIR)
  ulysses-ckpt export-hf runs/llama-lora/checkpoints -o llama-merged --merge-lora)");
  auto& o = st.export_hf;
  cmd->add_option("checkpoint", o.input, "A step-NNNNNNN directory, a run's checkpoints/ or the run directory")
      ->required();
  output_flags(cmd, o.output, o.overwrite, o.dry_run);
  cmd->add_option("--dtype", o.dtype, "Dtype of the written weights")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}))->capture_default_str();
  cmd->add_option("--max-shard-size", st.max_shard_size, "Largest file before sharding (5GB, 500MB, 2GiB, bytes)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", o.tokenizer, "Copy the tokenizer files of this directory");
  cmd->add_flag("--merge-lora", o.merge_lora, "A LoRA checkpoint: write the base with its adapters merged (as PEFT's "
                                              "merge_and_unload)");
  cmd->add_option("--base", o.base, "With --merge-lora: the base's Hugging Face directory (default: the run's "
                                    "--init-from)");
  nonfinite_flag(cmd, o.allow_nonfinite);
}

void set_up_export_peft(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("export-peft", "Write a LoRA checkpoint's adapters as a PEFT adapter directory");
  cmd->footer(R"(
Examples:
  # adapter_config.json + adapter_model.safetensors; base_model_name_or_path: the run's --init-from
  ulysses-ckpt export-peft runs/llama-lora/checkpoints -o llama-lora-adapter
  #   python: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), "llama-lora-adapter")
  # name the base as the Hub does, for AutoPeftModelForCausalLM.from_pretrained("llama-lora-adapter")
  ulysses-ckpt export-peft runs/llama-lora/checkpoints -o adapter --base meta-llama/Llama-3.1-8B
  # the merged full model instead
  ulysses-ckpt export-hf runs/llama-lora/checkpoints -o llama-merged --merge-lora)");
  auto& o = st.export_peft;
  cmd->add_option("checkpoint", o.input, "A LoRA run's step-NNNNNNN directory, its checkpoints/ or the run directory")
      ->required();
  output_flags(cmd, o.output, o.overwrite, o.dry_run);
  cmd->add_option("--dtype", o.dtype, "Dtype of the written adapters")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}))->capture_default_str();
  cmd->add_option("--base", o.base, "base_model_name_or_path to record (default: the run's --init-from)");
  nonfinite_flag(cmd, o.allow_nonfinite);
}

void set_up_import(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("import-hf", "Turn a Hugging Face model directory into a step-0 checkpoint");
  cmd->footer(R"(
Example:
  ulysses-ckpt import-hf Qwen3-0.6B/ -o qwen3-start
  mpiexec -n 4 ulysses-train --resume qwen3-start --model-config qwen3-start/config.json --sp 4 --data packed/ ...)");
  cmd->add_option("hf_dir", st.import_hf.input, "config.json + model.safetensors (or index + shards); F32/BF16/F16")
      ->required();
  output_flags(cmd, st.import_hf.output, st.import_hf.overwrite, st.import_hf.dry_run);
}

void set_up_inspect(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("inspect", "Print step, layout, config, files with checksums and tensors");
  cmd->footer(R"(
Examples:
  ulysses-ckpt inspect runs/llama-1m/checkpoints      # the latest checkpoint, checksums verified
  ulysses-ckpt inspect llama-1m-hf --no-tensors      # a Hugging Face directory
  ulysses-ckpt inspect llama-1m-hf/model.safetensors  # one file
  ulysses-ckpt inspect llama-lora-adapter             # an export-peft directory)");
  cmd->add_option("path", st.inspect.path,
                  "A checkpoint, a run's checkpoints/, an HF or PEFT adapter directory or a .safetensors file")
      ->required();
  cmd->add_flag("--no-tensors", st.no_tensors, "Do not list every tensor");
  cmd->add_flag("--no-checksums", st.no_checksums, "Do not hash the files (faster on large models)");
}

void set_up_diff(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("diff", "Compare two weight sets in fp32; exit 1 above --tolerance");
  cmd->footer(R"(
Examples:
  ulysses-ckpt diff runs/a/checkpoints runs/b/checkpoints --optimizer   # two checkpoints, bit for bit
  ulysses-ckpt diff runs/a/checkpoints llama-hf-bf16 --tolerance 1e-2    # a checkpoint against its bf16 export)");
  cmd->add_option("a", st.diff.a, "Checkpoint, HF directory or .safetensors file")->required();
  cmd->add_option("b", st.diff.b, "Checkpoint, HF directory or .safetensors file")->required();
  cmd->add_option("--tolerance", st.diff.tolerance, "Largest |a - b| per element that counts as equal")
      ->capture_default_str();
  cmd->add_flag("--optimizer", st.diff.optimizer, "Two checkpoints: compare the optimizer state too");
}

// A full disk shows up as a failed write deep inside; it is the user's to fix, so exit 2 as bad input.
int guarded(const std::function<int()>& body) {
  return ulysses::run_guarded([&] {
    try {
      return body();
    } catch (const ulysses::BadInput&) {
      throw;
    } catch (const std::exception& e) {
      if (std::strstr(e.what(), "No space left on device") || std::strstr(e.what(), "Disk quota exceeded"))
        throw ulysses::BadInput(fmt::format("the output filesystem is full: {}", e.what()),
                                "free some space or write to another filesystem (-o); nothing was left behind");
      throw;
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  ulysses::set_log_tag("ckpt");
  CLI::App app{"ulysses-ckpt: ulysses-train checkpoints <-> Hugging Face, without LibTorch"};
  app.require_subcommand(1);
  CliState st;
  set_up_merge(app, st);
  set_up_export(app, st);
  set_up_export_peft(app, st);
  set_up_import(app, st);
  set_up_inspect(app, st);
  set_up_diff(app, st);
  if (auto code = ulysses::parse_command_line(app, argc, argv)) return *code;
  return guarded([&] {
    if (app.got_subcommand("merge")) return uc::run_merge(st.merge);
    if (app.got_subcommand("export-hf")) {
      st.export_hf.max_shard_bytes = ulysses::parse_size(st.max_shard_size, "--max-shard-size");
      return uc::run_export_hf(st.export_hf);
    }
    if (app.got_subcommand("export-peft")) return uc::run_export_peft(st.export_peft);
    if (app.got_subcommand("import-hf")) return uc::run_import_hf(st.import_hf);
    if (app.got_subcommand("inspect")) {
      st.inspect.tensors = !st.no_tensors;
      st.inspect.checksums = !st.no_checksums;
      return uc::run_inspect(st.inspect);
    }
    return uc::run_diff(st.diff);
  });
}

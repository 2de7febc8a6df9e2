#include "train/cli.hpp"

#include <memory>

#include "arch/rope_flags.hpp"
#include "core/cli.hpp"
#include "core/number_checks.hpp"
#include "core/strict_config.hpp"
#include "plan/memory_flags.hpp"

namespace ulysses::train {
namespace {

// Ceilings of the counts, far past any run, so that no count overflows what is computed from it (an ETA, a cursor of
// sequences consumed, a rank table).
constexpr std::int64_t kMostSteps = 1'000'000'000'000;   // optimizer steps
constexpr std::int64_t kMostSequences = 1 << 20;          // sequences per micro-batch, micro-batches per step

const char* kExamples = R"(
Examples:
  # SP=4 on 4 CPU ranks, a tiny model from scratch on the sample corpus
  mpiexec -n 4 ulysses-train --data out/packed --model-config datasets/sample/tiny-llama/config.json \
      --sp 4 --steps 40 --lr 3e-3 --output out/run
  # continue a run after preemption (Slurm requeue), from its latest checkpoint
  srun --mpi=pmi2 ulysses-train --config run.toml --resume auto
  # fine-tune a Hugging Face model, SP=8 inside each node, DP across nodes
  srun --mpi=pmi2 ulysses-train --init-from /models/Llama-3.2-1B --data packed-128k --sp 8 --output run1
  # context extension: Qwen3 from 32K to 128K with YaRN x4 (checkpoints, --resume and export-hf keep it)
  srun --mpi=pmi2 ulysses-train --init-from /models/Qwen3-8B --data packed-128k --sp 8 --output run2 \
      --rope-scaling '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}'
  # one node of 8 GPUs, the model in bf16 over fp32 masters, SP=8 over NCCL; MFU against the GPU's bf16 peak
  srun --mpi=pmi2 --ntasks-per-node=8 ulysses-train --config run.toml --sp 8 --device cuda --precision bf16
  # the same with gradients reduce-scattered in bf16 and the residual stream kept in fp32 (Megatron's flags)
  srun --mpi=pmi2 --ntasks-per-node=8 ulysses-train --config run.toml --sp 8 --precision bf16 --reduce-dtype bf16 \
      --fp32-residual
  # long sequences: recompute each layer in backward, the MLP over tiles, the loss over 1 GiB chunks of logits
  srun --mpi=pmi2 ulysses-train --config run.toml --activation-checkpointing --tiled-mlp --tiled-logits
  # debugging: 4 ranks share one GPU, collectives through MPI host staging
  mpiexec -n 4 ulysses-train --config run.toml --sp 4 --device cuda --comm mpi
  # validate config, data and layout; print the rank map and the memory plan (builds no model)
  mpiexec -n 4 ulysses-train --config run.toml --dry-run
  # measure this device's memory profile for ulysses-plan (one rank, a small model of the family)
  ulysses-train --calibrate-memory h100-bf16.json --model-config small/config.json --device cuda --precision bf16
  # GB200 NVL72 (4 GPUs per node, sbatch --segment=18): SP 8 spans 2 nodes of one 72-GPU NVLink domain
  srun --mpi=pmi2 ulysses-train --config run.toml --sp 8 --island-size 72
  # past the head limit: SP 32 over 4 nodes as Ulysses 8 inside each node × a ring of 4 across them
  srun --mpi=pmi2 --ntasks-per-node=8 ulysses-train --config run.toml --sp 32 --sp-ring 4

Exit codes: 0 done, 1 failure, 2 bad input, 3 stopped by SIGUSR1/SIGTERM/SIGINT (Ctrl-C) after saving (resume it), 4 stopped on a
non-finite loss or gradient norm (nothing saved on it: the last checkpoint is the last good state).)";

// What to train on, where it writes, the layout and the length of the run.
void add_run_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data, "Packed dataset directory (ulysses-pack); required to train");
  app.add_option("--model-config", o.model_config, "Hugging Face config.json: train from scratch");
  app.add_option("--init-from", o.init_from, "Hugging Face model directory (config.json + safetensors)");
  arch::add_rope_flags(app, o.rope);
  // Kept as given ("auto" or the number), so that --print-config writes what reads back.
  app.add_option_function<std::string>("--router-aux-loss-coef", [&o](const std::string& text) {
                   o.router_aux_loss_coef = text == "auto" ? -1 : std::stod(text);
                 },
                 "Mixture of experts: the load-balancing loss's weight; > 0 trains it (loss + coef × aux_loss), 0 "
                 "turns it off; auto: config.json's router_aux_loss_coef when its output_router_logits is true, "
                 "else 0")
      ->check(real_number(0, kUnbounded) | CLI::IsMember({"auto"}))
      ->default_str("auto");
  app.add_option("--output", o.output, "Run directory: checkpoints/, metrics.jsonl, tensorboard/; required to train");
  app.add_option("--tensorboard", o.tensorboard,
                 "TensorBoard event folder for the metrics (default OUTPUT/tensorboard; 'none': off); "
                 "view with: tensorboard --logdir OUTPUT");
  app.add_option("--sp", o.sp, "Sequence-parallel degree (DP = world / sp)")
      ->check(whole_number(1, kMostRanks))->capture_default_str();
  add_sp_ring_option(app, o.sp_ring,
                     "--sp 32 --sp-ring 4 is Ulysses 8 (all-to-alls inside an island) × a ring of 4 (K/V blocks "
                     "across islands); past the head limit, and S % (2 × sp) == 0");
  app.add_option("--micro-batch", o.micro_batch, "Sequences per micro-batch per DP rank")
      ->check(whole_number(1, kMostSequences))->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "Micro-batches per optimizer step")
      ->check(whole_number(1, kMostSequences))->capture_default_str();
  app.add_option("--steps", o.steps, "Optimizer steps in total")
      ->check(whole_number(1, kMostSteps))->capture_default_str();
}

// AdamW, the learning-rate schedule and the seed.
void add_optimizer_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--lr", o.lr, "Peak learning rate (0: the weights stay as they are, to save or evaluate them)")
      ->check(real_number(0, kUnbounded))->capture_default_str();
  app.add_option("--min-lr-ratio", o.min_lr_ratio, "Final lr as a fraction of --lr")
      ->check(real_number(0, 1))->capture_default_str();
  app.add_option("--warmup", o.warmup, "Linear warmup steps")
      ->check(whole_number(0, kMostSteps))->capture_default_str();
  app.add_option("--lr-decay", o.lr_decay, "cosine, linear or constant")
      ->check(CLI::IsMember({"cosine", "linear", "constant"}))->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (not on norms and biases)")
      ->check(real_number(0, kUnbounded))->capture_default_str();
  app.add_option("--beta1", o.beta1, "AdamW beta1")
      ->check(real_number(0, 1, Bound::kClosed, Bound::kOpen))->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")
      ->check(real_number(0, 1, Bound::kClosed, Bound::kOpen))->capture_default_str();
  app.add_option("--eps", o.eps, "AdamW epsilon")
      ->check(real_number(0, kUnbounded, Bound::kOpen))->capture_default_str();
  app.add_option("--clip", o.clip, "Clip the global gradient norm to this (0: off)")
      ->check(real_number(0, kUnbounded))->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of initialisation and data order")->capture_default_str();
}

// Checkpoints, evaluation and resuming.
void add_checkpoint_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--save-every", o.save_every,
                 "Checkpoint every N steps and at the end (0: only at the end; -1: never, not even on a stop "
                 "signal: benchmarks, calibration)")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.starts_with("-") && v != "-1" ? "\"" + v + "\" is not N ≥ 0 or -1 (never save)" : std::string();
          },
          "N ≥ 0 or -1"))
      ->capture_default_str();
  app.add_option("--keep-last", o.keep_last, "Checkpoints kept, the newest (0: all)")
      ->check(whole_number(0, kMostInt))->capture_default_str();
  app.add_option("--eval-every", o.eval_every,
                 "Evaluate on the validation split (ulysses-pack --valid-fraction) every N steps and at the end: "
                 "eval loss and perplexity in the log and metrics.jsonl (0: never)")
      ->check(whole_number(0, kMostCount))->capture_default_str();
  app.add_option("--eval-sequences", o.eval_sequences, "Validation sequences per evaluation (0: all of them)")
      ->check(whole_number(0, kMostCount))->capture_default_str();
  app.add_option("--resume", o.resume,
                 "'auto' (latest under --output, if any), a run directory, its checkpoints/ or latest, or a step "
                 "directory; the model comes from the checkpoint");
  app.add_flag("--allow-changes", o.allow_changes,
               "Resume although the dataset, the seed or the sequences per step differ from the checkpoint's run");
  app.add_option("--on-nonfinite", o.on_nonfinite,
                 "A step whose loss or gradient norm is NaN or infinite: stop (exit 4, nothing saved on it; the last "
                 "checkpoint is the last good state) or skip (no update: the data and the schedule move on)")
      ->check(CLI::IsMember({"stop", "skip"}))->capture_default_str();
  app.add_option("--max-skipped-steps", o.max_skipped_steps,
                 "--on-nonfinite skip: stop (exit 4) after this many non-finite steps in a row")
      ->check(whole_number(1, kMostCount))->capture_default_str();
}

// The device, the memory features (plan/memory_flags.hpp) and the memory profile.
void add_device_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--device", o.device, "auto (cuda when built with CUDA and a GPU is visible), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  plan::add_memory_flags(app, o.memory);
  app.add_option("--memory-profile,--profile", o.memory_profile,
                 "Constants of the memory plan that refuses runs which cannot fit: a file from --calibrate-memory, or "
                 "built-in cpu, h100, h200 (default: by device)");
  app.add_option("--calibrate-memory", o.calibrate_memory,
                 "Measure this device's memory profile (4 feature sets × --calibrate-lengths, one rank, "
                 "the --model-config model) and write it here for ulysses-plan --profile; no --data/--output needed")
      ->configurable(false);
  app.add_option("--calibrate-lengths", o.calibrate_lengths, "Two or more sequence lengths for --calibrate-memory")
      ->capture_default_str();
}

// The job around the run: collectives, its end and time limits, threads, the layout it must have, checks.
void add_job_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--comm", o.comm, "Collectives: auto (nccl on cuda, mpi on cpu), nccl, or mpi (CUDA tensors via host)")
      ->check(CLI::IsMember({"auto", "nccl", "mpi"}))->capture_default_str();
  app.add_option("--end-time", o.end_time,
                 "The job's end in seconds since the epoch (0: SLURM_JOB_END_TIME when set): the run saves and exits 3 "
                 "before it")
      ->check(real_number(0, kUnbounded))->capture_default_str();
  app.add_option("--stop-margin", o.stop_margin,
                 "Seconds before --end-time by which a step and a save must be done: later, the run saves and exits 3")
      ->check(real_number(0, kUnbounded))->capture_default_str();
  app.add_option("--comm-timeout", o.comm_timeout, "Seconds a NCCL collective may take before the job ends (0: none)")
      ->check(whole_number(0, kMostInt))->capture_default_str();
  app.add_option("--save-timeout", o.save_timeout,
                 "Seconds a checkpoint save (every rank's writes and the barrier after them) may take before the job "
                 "ends (0: none)")
      ->check(whole_number(0, kMostInt))->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops, "Peak TFLOPS per device for MFU (0: the detected GPU's bf16 peak)")
      ->check(real_number(0, kUnbounded))->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per rank (0: cores / ranks per node)")
      ->check(whole_number(0, kMostRanks))->capture_default_str();
  app.add_option("--world", o.world, "Expected number of ranks (0: SLURM_NTASKS when set)")
      ->check(whole_number(0, kMostInt))->capture_default_str();
  app.add_option("--island-size", o.island_size,
                 "Ranks per NVLink island, whole nodes (0: one node; 72 on GB200 NVL72 with sbatch --segment)")
      ->check(whole_number(0, kMostRanks))->capture_default_str();
  app.add_flag("--allow-sp-across-islands", o.allow_sp_across_islands,
               "Run even when an SP group spans NVLink islands (its all-to-alls then cross InfiniBand)");
  app.add_flag("--ignore-memory-plan", o.ignore_memory_plan,
               "Run although the memory plan says the run cannot fit (a warning line instead of the refusal): to "
               "find where it really fails, or where the plan's profile is too cautious");
  app.add_flag("--dry-run", o.dry_run, "Validate config, data and layout; print the rank map and memory plan")
      ->configurable(false);
  app.add_flag("--overwrite", o.overwrite, "Start over in an --output that already holds checkpoints");
}

}  // namespace

void set_up(CLI::App& app, TrainOptions& o, bool& print_config) {
  app.set_config("--config", "", "TOML config file: keys are the flags without -- (save-every or save_every); an "
                 "unknown key or a [section] is an error; flags given on the command line override it");
  app.footer(kExamples);
  add_run_flags(app, o);
  add_optimizer_flags(app, o);
  add_checkpoint_flags(app, o);
  add_device_flags(app, o);
  add_job_flags(app, o);
  app.add_flag("--print-config", print_config, "Print the resolved configuration as TOML and exit")
      ->configurable(false);
  app.config_formatter(std::make_shared<StrictConfig>(app));   // unknown keys and sections: exit 2
}

}  // namespace ulysses::train

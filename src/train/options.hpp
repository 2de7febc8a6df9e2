// Everything a training run is told, with defaults. Filled by the CLI (flags and/or a TOML config file),
// recorded in every checkpoint's trainer_state.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "arch/model_config.hpp"
#include "plan/memory_flags.hpp"

namespace ulysses::train {

struct TrainOptions {
  std::filesystem::path data;              // a dataset directory made by ulysses-pack
  std::filesystem::path model_config;      // a Hugging Face config.json (from-scratch init)
  std::filesystem::path init_from;         // or a Hugging Face model directory (config.json + safetensors)
  arch::RopeOverride rope;                 // --rope-scaling, --rope-theta: context extension over that config
  double router_aux_loss_coef = -1;        // MoE: the load-balancing loss's weight (-1: the config's; 0: off)
  std::filesystem::path output;            // run directory: checkpoints/, metrics.jsonl, tensorboard/
  std::string tensorboard;                 // TensorBoard event folder ("": output/tensorboard; "none": off)
  std::int64_t sp = 1;                     // sequence-parallel degree; DP = world / sp
  std::int64_t sp_ring = 1;                // ring degree inside it (Ulysses degree sp / sp_ring)
  std::int64_t micro_batch = 1;            // sequences per micro-batch per DP rank
  std::int64_t grad_accum = 1;
  std::int64_t steps = 100;                // optimizer steps in total (a resumed run continues to this)
  double lr = 3e-4, min_lr_ratio = 0.1;
  std::int64_t warmup = 0;
  std::string lr_decay = "cosine";
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, clip = 1.0;
  std::uint64_t seed = 1234;               // init and data order
  std::int64_t save_every = 0;             // N: every N steps; 0: only at the end; both on a stop signal; -1: never
  std::int64_t eval_every = 0;             // evaluate on the validation split every N steps and at the end (0: never)
  std::int64_t eval_sequences = 0;         // validation sequences per evaluation (0: all)
  int keep_last = 3;
  std::string resume;                      // "", "auto" (latest under output, if any), or a checkpoint dir
  bool allow_changes = false;              // resume with another dataset, seed or sequences per step
  std::string on_nonfinite = "stop";       // a non-finite loss or gradient norm: stop (exit 4) or skip the step
  std::int64_t max_skipped_steps = 10;     // skip: stop after this many non-finite steps in a row
  std::string device = "auto";             // auto (cuda when built with CUDA and a GPU is visible), cpu, cuda
  plan::MemoryFlags memory;                // precision, sharding, offload and activation features (plan/memory_flags)
  std::string memory_profile;              // the planner's constants: a built-in name or a calibration file ("": by device)
  std::filesystem::path calibrate_memory;  // write a memory profile measured on this device, then exit
  std::string calibrate_lengths = "1024,2048";   // the calibration's sequence lengths
  std::string comm = "auto";               // auto (nccl on cuda, mpi on cpu), nccl, mpi (CUDA: host staging)
  double end_time = 0;                     // the job's end, seconds since the epoch (0: SLURM_JOB_END_TIME, if set)
  double stop_margin = 300;                // stop (save, exit 3) when a step and a save would end later than end − this
  int comm_timeout = 600;                  // seconds a NCCL collective may take before the job is ended (0: none)
  int save_timeout = 1800;                 // seconds a checkpoint save (writes + barrier) may take before that (0: none)
  double peak_tflops = 0;                  // MFU denominator per device (0: the detected GPU's bf16 peak, if known)
  int threads = 0;                         // intra-op threads per rank (0: cores / ranks on this node)
  int world = 0;                           // expected world size (0: SLURM_NTASKS if set)
  int island_size = 0;                     // ranks per NVLink island (0: one node; 72 on GB200 NVL72)
  bool allow_sp_across_islands = false;    // accept SP groups that span islands (slow all-to-alls)
  bool dry_run = false;
  bool ignore_memory_plan = false;         // a plan that does not fit is a warning line instead of the refusal
  bool overwrite = false;                  // start over in an output that holds checkpoints
};

nlohmann::json to_json(const TrainOptions& o);

// --init-from's config.json, else --model-config, else the config.json of the checkpoint resumed from (`from`);
// BadInput when there is none, or when --model-config differs from the checkpoint's.
std::filesystem::path model_config_path(const TrainOptions& options,
                                        const std::optional<std::filesystem::path>& from = std::nullopt);

// The model this run trains: model_config_path's config.json with --rope-scaling / --rope-theta applied, and
// --router-aux-loss-coef (BadInput on a model without routed experts). Resuming, the
// RoPE (rope_scaling, rope_theta) is the checkpoint's, what its run trained with, and the flags, when given, must
// give the same (BadInput otherwise). `text`: what the run's checkpoints hold as config.json — the file's own bytes,
// or, where RoPE was replaced, the config rewritten.
struct RunModelConfig {
  std::filesystem::path path;
  arch::ModelConfig config;
  std::string text;
};
RunModelConfig run_model_config(const TrainOptions& options,
                                const std::optional<std::filesystem::path>& from = std::nullopt);

// Where the TensorBoard events go: --tensorboard, by default OUTPUT/tensorboard; nothing for "none".
std::optional<std::filesystem::path> tensorboard_dir(const TrainOptions& o);

}  // namespace ulysses::train

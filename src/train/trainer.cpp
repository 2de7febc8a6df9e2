#include "train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <optional>
#include <thread>

#include <fmt/ranges.h>

#include "arch/parameters.hpp"
#include "comm/backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "core/run_lock.hpp"
#include "core/sequence_parallel.hpp"
#include "data/loader.hpp"
#include "io/checkpoint_format.hpp"
#include "io/manifest.hpp"
#include "io/safetensors.hpp"
#include "model/causal_lm.hpp"
#include "model/document_attention.hpp"
#include "model/options.hpp"
#include "model/weights.hpp"
#include "plan/advice.hpp"
#include "plan/fit_check.hpp"
#include "plan/memory_model.hpp"
#include "plan/plan_report.hpp"
#include "train/adamw.hpp"
#include "train/all_ranks.hpp"
#include "train/checkpoint.hpp"
#include "train/checkpointer.hpp"
#include "train/device.hpp"
#include "train/evaluator.hpp"
#include "train/finite_guard.hpp"
#include "train/model_states.hpp"
#include "train/placement.hpp"
#include "train/rank_groups.hpp"
#include "train/report.hpp"
#include "train/resume.hpp"
#include "train/schedule.hpp"
#include "train/signals.hpp"
#include "train/step.hpp"

namespace fs = std::filesystem;

namespace ulysses::train {
namespace {

// A run as the build phase makes it, part by part: where it runs, its groups, the model it trains and its plan,
// its data and what it continues from.
struct Run {
  const TrainOptions& o;
  const RankLayout& layout;
  int rank;
  comm::Communicator& world;   // control messages over MPI: CPU tensors (flags, maxima, the rank table)
  Placement place;
  std::unique_ptr<RankGroups> groups;
  SequenceParallel sp;                          // this rank's SP group (groups->sequence() inside)
  fs::path config_path;
  arch::ModelConfig config;                     // with the RoPE flags applied (or, resuming, the checkpoint's RoPE)
  std::string config_text;                      // the checkpoints' config.json
  plan::Features features;                      // the memory flags, resolved
  model::ModelOptions options;
  plan::MemoryPlan memory;                      // this rank's memory plan (nothing built)
  std::optional<data::DataLoader> data, valid;  // valid: --eval-every's split
  std::optional<fs::path> from;                 // the checkpoint --resume names (nullopt: a fresh start)
  std::optional<double> end;                    // the job's end (--end-time, SLURM_JOB_END_TIME), epoch seconds
  model::CausalLm model{nullptr};               // not built by --dry-run
  std::unique_ptr<ModelStates> states;
  std::optional<RunLock> lock;                  // rank 0 of a real run: --output is this run's (core/run_lock.hpp)
};

// Rank 0 checks --output's paths; of a real run, it takes --output's lock before anything reads or writes its
// checkpoints, makes checkpoints/ (a folder it cannot make is found now, not at the first save), then removes what
// killed saves left there (no other run can be saving: the lock says so).
void lock_output(Run& r) {
  if (r.rank != 0) return;
  check_output_paths(r.o);
  if (r.o.dry_run) return;
  r.lock.emplace(r.o.output);
  std::error_code ec;
  if (r.o.save_every >= 0 && (fs::create_directories(r.o.output / "checkpoints", ec), ec))
    throw BadInput(fmt::format("cannot create {}: {}", (r.o.output / "checkpoints").string(), ec.message()),
                   "check the permissions and free space of --output, or pass another");
  if (!r.lock->warning().empty()) log_info("warning: {}", r.lock->warning());
  if (!r.lock->taken_over().empty())
    log_info("took over {}/.lock from a run that ended without releasing it ({})", r.o.output.string(),
             r.lock->taken_over());
  for (const fs::path& tmp : checkpoint::save_temporaries(r.o.output / "checkpoints")) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    log_info("removed {}: left by a save that did not finish", tmp.string());
  }
}

// --resume's checkpoint, its files checked against its manifest by all ranks together (resume.hpp); with auto, the
// newest that verifies. False when there is none to continue, or a named one is damaged (exit 2).
bool choose_checkpoint(Run& r) {
  std::vector<fs::path> candidates;
  if (bad_input_on_any_rank(r.world, r.rank, [&] { candidates = resume_candidates(r.o, r.rank == 0); })) return false;
  return !bad_input_on_any_rank(r.world, r.rank, [&] {
    r.from = verified_checkpoint(candidates, r.o.resume == "auto", r.world);
  });
}

// The rank's groups, for the resolved --sharding; false when --sharding was bad (exit 2).
bool make_groups(Run& r, const dist::ProcessGroups& groups) {
  plan::Sharding sharding = plan::Sharding::kNone;
  const auto resolve = [&] { sharding = plan::resolve_sharding(r.o.memory, r.layout.world()); };
  if (bad_input_on_any_rank(r.world, r.rank, resolve)) return false;
  r.groups = std::make_unique<RankGroups>(groups, r.o.dry_run ? comm::Backend::kMpi : r.place.backend, r.place.device,
                                          std::chrono::seconds(r.o.comm_timeout), sharding,
                                          plan::prefetches(r.o.memory.prefetch, r.place.device.is_cuda()),
                                          r.o.memory.attention_head_groups != 1);
  r.sp = SequenceParallel(r.layout, r.rank, &r.groups->ulysses(), r.groups->ring(), &r.groups->ulysses_ahead());
  return true;
}

// What --prefetch issues ahead, on side streams: one line, or none when it has nothing to issue.
void log_prefetch(const model::ModelOptions& mo, bool sharded) {
  std::vector<std::string> ahead;
  if (sharded) ahead.emplace_back("the next unit's all-gather is issued ahead");
  if (mo.offload_checkpoints() > 0)
    ahead.emplace_back("the previous layer's offloaded input is copied back ahead in backward");
  if (mo.attention_head_groups() > 1)
    ahead.emplace_back(mo.heads_ahead() ? "the next head group's projections and all-to-all are issued ahead of its "
                                          "attention"
                                        : "head groups in turn (the next one's q, k, v issued ahead would not fit)");
  if (!ahead.empty()) log_info("prefetch: {}", fmt::join(ahead, "; "));
}

// The model description against --sp, --init-from's weights, and what --resume continues.
void read_model(Run& r) {
  r.end = job_end_time(r.o.end_time);
  if (r.from) check_resume_changes(r.o, *r.from, r.layout.dp(), r.rank == 0);
  RunModelConfig model = run_model_config(r.o, r.from);
  r.config_path = std::move(model.path);
  r.config = std::move(model.config);
  r.config_text = std::move(model.text);
  arch::check_heads_for_sp(r.config, r.sp.degree(), r.config_path.string(), r.sp.ring_degree());
  // --init-from's weights are there (their headers read) before the memory plan judges the model they describe
  if (!r.o.init_from.empty()) static_cast<void>(st::HfWeights(r.o.init_from));
}

// The data's S against --sp, with the degrees this model allows in the hint (plan/advice.hpp).
void check_sp_splits_data(const Run& r) {
  const shard::Manifest m = shard::read_manifest(r.o.data);
  const std::string source = fmt::format("{} (packed for --sp {})", r.o.data.string(), m.sp);
  plan::check_sp_for_length(r.config, r.layout.world(), r.layout.sp(), m.seq_len, source, r.layout.ring());
}

// The training split and, with --eval-every, the validation split: S against --sp, ids against the vocabulary.
void open_data(Run& r) {
  check_sp_splits_data(r);
  const std::int64_t dp_rank = r.layout.dp_rank(r.rank);
  r.data.emplace(r.o.data, data::LoaderOptions{.sp = r.sp, .dp = r.layout.dp(), .dp_rank = dp_rank,
                                               .micro_batch = r.o.micro_batch, .grad_accum = r.o.grad_accum,
                                               .seed = r.o.seed, .vocab_size = r.config.vocab_size, .split = "train"});
  if (r.o.eval_every > 0)
    r.valid.emplace(r.o.data, data::LoaderOptions{.sp = r.sp, .dp = r.layout.dp(), .dp_rank = dp_rank,
                                                  .micro_batch = 1, .grad_accum = 1, .seed = r.o.seed,
                                                  .vocab_size = r.config.vocab_size, .split = "valid"});
}

// This rank's memory plan at the data's length, and the features it resolves (the model is built with those); a
// BadInput when it cannot fit (unless --ignore-memory-plan: then the first rank of each node that does not fit
// warns).
void check_memory(Run& r) {
  const Topology& topo = r.place.topo;
  const int ranks_here = topo.ranks_on_node(topo.place(r.rank).node);
  const int world = r.layout.world();
  const plan::Layout where{.nodes = world % ranks_here == 0 ? world / ranks_here : topo.num_nodes(),
                           .ranks_per_node = ranks_here, .sp = r.layout.sp(), .micro_batch = r.o.micro_batch,
                           .island = r.place.topo.island_ranks(), .across_islands = r.o.allow_sp_across_islands,
                           .ring = r.layout.ring()};
  const c10::Device& device = r.place.device;
  const bool cuda = device.is_cuda();
  r.memory = plan::check_memory_fits(r.config, r.o.memory, where,
                                     {cuda, device_name(device), cuda ? device_memory_bytes(device) : 0},
                                     r.o.memory_profile, r.data->seq_len(), !r.o.ignore_memory_plan);
  if (topo.place(r.rank).local_rank == 0 && !r.memory.unfit.empty())   // each node's plan, by its first rank
    log_info("warning: running anyway (--ignore-memory-plan): {}", r.memory.unfit);
  r.features = r.memory.features;   // --attention-head-groups auto: settled at the data's length
  r.options = model::model_options(r.features, r.place.precision, device.is_cuda());
}

// The model, sharded or not, with its initial weights (seeded, or --init-from).
void build_model(Run& r) {
  r.model = model::CausalLm(r.config, r.sp, r.options,
                            r.groups->states_on(r.place.device, r.features));
  if (r.o.init_from.empty()) {
    model::init_weights(r.model, r.o.seed);
  } else {
    model::load_hf_weights(r.model, r.o.init_from);
    model::init_adapters(r.model, r.o.seed);   // LoRA's, if any
  }
}

// The start-up log's attention line: the ring's layout and piece kernel, or the kernel each layer's attention runs.
std::string attention_line(const Run& r, std::int64_t seq_len) {
  const arch::UlyssesHeads heads = arch::ulysses_heads(r.config, r.sp.ulysses_degree());
  const auto dtype = model::compute_dtype(r.place.precision);
  const bool unseen = r.o.dry_run && r.place.device.is_cuda();   // a dry run touches no GPU
  if (r.layout.ring() > 1)
    return fmt::format("Ulysses {} inside each group × a ring of {} (K/V blocks of {} tokens passed round, merged by "
                       "their log-sum-exp); each piece by {}", r.layout.ulysses(), r.layout.ring(),
                       seq_len / r.layout.ring(),
                       unseen ? "the kernel chosen on the GPU at start-up"
                              : model::piece_kernel(r.place.device, dtype, r.config.head_dim));
  if (unseen) return "the kernel is chosen on the GPU at start-up (a dry run touches no GPU)";
  return model::attention_kernel(r.place.device, dtype, heads.q, heads.kv, r.config.head_dim,
                                 r.config.sliding_window.has_value());
}

void print_plan(const Run& r, const data::DataLoader& loader) {
  log_line(topology_line(r.layout, r.place.topo, std::getenv("SLURM_NTASKS")));
  if (r.o.dry_run || r.layout.world() <= kFullRankMapUpTo) {
    for (const auto& line : rank_map_lines(r.layout, r.place.topo, r.place.device.is_cuda())) log_line(line);
  } else {
    log_info("rank map: {} ranks, printed by --dry-run", r.layout.world());
  }
  log_info("model {}: {} parameters, {} layers, {} heads ({} KV), hidden {}", r.config.architecture,
           arch::parameter_count(r.config), r.config.num_layers, r.config.num_heads, r.config.num_kv_heads, r.config.hidden_size);
  log_info("data {}: {} train sequences of {} tokens; {} sequences per step (dp {} × micro {} × accum {})",
           r.o.data.string(), loader.num_sequences(), loader.seq_len(), loader.sequences_per_step(), r.layout.dp(),
           r.o.micro_batch, r.o.grad_accum);
  if (loader.manifest().sp != r.layout.sp())   // a forgotten --sp runs, but the user should know
    log_info("note: the data was packed for --sp {} and this run has --sp {} ({}; DP {}): pass --sp {} to run as it "
             "was packed",
             loader.manifest().sp, r.layout.sp(),
             r.layout.sp() == 1 ? "each sequence whole on one rank"
                                : fmt::format("each sequence split over {} ranks", r.layout.sp()),
             r.layout.dp(), loader.manifest().sp);
  if (r.features.lora_rank > 0)
    log_info("LoRA: rank {}, alpha {}{} on {}: {} adapter parameters trained, the base's {} frozen",
             r.features.lora_rank, r.features.lora_alpha, r.features.lora_rslora ? " (rsLoRA)" : "",
             fmt::join(r.features.lora_targets, ", "), plan::lora_parameter_count(r.config, r.features),
             arch::parameter_count(r.config));
  log_info("device {}; precision {}; collectives {}{}", device_line(r.place.device), r.o.memory.precision,
           comm::backend_name(r.place.backend),
           r.place.backend == comm::Backend::kMpi && r.place.device.is_cuda() ? " (CUDA tensors staged through host memory)" : "");
  log_info("attention: {}", attention_line(r, loader.seq_len()));
  const std::int64_t chunk = r.options.logits_chunk_tokens();
  const model::ModelOptions& mo = r.options;
  log_info("activations: {}{}", mo.activation_checkpointing()
                                    ? "checkpointed per decoder layer (inputs kept, each layer recomputed in backward)"
                                    : "every layer's intermediates kept for backward",
           mo.mlp_tile_tokens() > 0 ? fmt::format("; MLP in tiles of {} tokens", mo.mlp_tile_tokens()) : "");
  if (mo.offload_checkpoints() > 0)
    log_info("checkpoint offload: the inputs of {} of {} layers go to host memory ({})",
             std::min(mo.offload_checkpoints(), r.config.num_layers), r.config.num_layers,
             r.place.device.is_cuda() ? "copied on a side stream" : "copied at once: no streams on a CPU");
  if (mo.prefetch()) log_prefetch(mo, r.groups->sharding() != plan::Sharding::kNone);
  log_info("loss: {}", chunk > 0 ? fmt::format("tiled logits, {} tokens per chunk ({:.2f} GiB of fp32 logits)", chunk,
                                               4.0 * static_cast<double>(chunk) *
                                                   static_cast<double>(r.config.vocab_size) / (1 << 30))
                                 : std::string("whole logits ([S/P, vocab] fp32 per micro-batch)"));
  if (r.place.peak_tflops)
    log_info("MFU against {:.1f} TFLOPS per device{}", *r.place.peak_tflops,
             r.o.peak_tflops > 0                          ? " (--peak-tflops)"
             : r.place.precision != model::Precision::kFp32 ? " (dense bf16 peak of this GPU)"
                                                          : " (FP32 peak of this GPU: fp32 matmuls do not use TF32)");
  // --attention-head-groups auto that chose all heads at once says so (the line otherwise names no head groups)
  const bool auto_one_group =
      r.o.memory.attention_head_groups == plan::kAutoHeadGroups && r.features.attention_head_groups == 1;
  log_info("memory: {}{}", plan::features_line(r.features, r.config, r.memory.layout),
           auto_one_group ? "; attention head groups auto: 1 (all heads at once fit, every tensor under 2^31 elements)"
                          : "");
  log_info("memory plan at S = {} (profile {}: {}):", loader.seq_len(), r.memory.profile.name, r.memory.profile.source);
  for (const auto& line : plan::breakdown_lines(r.memory.breakdown, r.memory.layout, r.memory.machine))
    log_info("  {}", line);
  if (r.o.eval_every > 0)
    log_info("eval: every {} steps and at the end, on {} validation sequence(s)", r.o.eval_every,
             r.o.eval_sequences > 0 ? std::min(r.o.eval_sequences, r.valid->num_sequences()) : r.valid->num_sequences());
  const auto events = tensorboard_dir(r.o);
  const std::string checkpoints =
      r.o.save_every < 0 ? "no checkpoints (--save-every -1), "
                         : fmt::format("{}/checkpoints/step-NNNNNNN ({}at the end and on a stop signal), ",
                                       r.o.output.string(),
                                       r.o.save_every > 0 ? fmt::format("every {} steps, ", r.o.save_every) : "");
  log_info("writes: {}{}/metrics.jsonl{}", checkpoints, r.o.output.string(),
           events ? ", TensorBoard events in " + events->string() : "");
}

// One optimizer step; returns the report (loss over all ranks). A non-finite loss or gradient norm on any rank
// (finite_guard.hpp) updates nothing: the report says so (nonfinite) and the caller's guard decides.
StepReport train_step(Run& r, data::DataLoader& loader, const Schedule& schedule, std::int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const LossTotals totals = compute_gradients(r.model, loader, r.o.grad_accum, *r.states, r.place.device,
                                                DataAgreement{r.world, r.rank});
  if (totals.count == 0)   // every rank sees the same sum: all refuse together, before AdamW steps on nothing
    throw BadInput(fmt::format("step {}: none of its {} sequences of {} holds a target token (its loss mask is 0 "
                               "everywhere)", step, loader.sequences_per_step(), r.o.data.string()),
                   "check the mask the data was packed with (ulysses-pack inspect), or pack without "
                   "--loss-mask-key to train on every token");
  StepReport rep;
  rep.loss = totals.mean();
  if (totals.forwards > 0) rep.aux_loss = totals.aux_loss();
  rep.grad_norm = r.states->clip(r.o.clip);
  rep.lr = schedule.lr_at(step);
  rep.nonfinite = any_rank(!std::isfinite(rep.loss) || !std::isfinite(rep.grad_norm), r.world);
  if (rep.nonfinite) r.states->drop_gradients();
  else r.states->step(rep.lr);
  synchronize(r.place.device);   // the step's time includes the optimizer's kernels
  loader.advance_step();
  rep.step = step;
  rep.steps = r.o.steps;
  rep.tokens = static_cast<std::int64_t>(totals.count);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens = static_cast<double>(loader.sequences_per_step() * loader.seq_len());
  rep.tokens_per_s = tokens / rep.seconds;
  rep.tflops = plan::step_flops(r.config, tokens, totals.attention_pairs) / rep.seconds / 1e12;
  rep.tflops_per_device = rep.tflops / r.layout.world();
  if (r.place.peak_tflops) rep.mfu = rep.tflops_per_device / *r.place.peak_tflops;
  rep.peak_mib = max_over_ranks(peak_rss_mib(), r.world);
  if (auto gpu = peak_gpu_mib(r.place.device)) rep.peak_gpu_mib = max_over_ranks(*gpu, r.world);
  return rep;
}

// --dry-run: the checks a real run makes first, without touching anything; rank 0 prints the plan.
int dry_run(const Run& r) {
  if (!r.o.overwrite) check_output(r.o, r.rank);
  if (r.rank == 0) {
    print_plan(r, *r.data);
    if (r.from) {
      const checkpoint::Manifest m = checkpoint::read_manifest(*r.from);
      log_info("would resume from {}: step {}, written at world {} = sp {} x dp {}, {} states", r.from->string(), m.step,
               m.world, m.sp, m.dp, m.optimizer_layout);
    }
    end_dry_run();
  }
  if (any_rank(stop_requested(), r.world)) {   // Slurm's one warning would be lost with this step
    if (r.rank == 0) log_info("stop signal during the dry run: exiting with code {}", static_cast<int>(kExitPreempted));
    return kExitPreempted;
  }
  return kExitOk;
}

// The trained states on the device, the output folder checked, the checkpoint loaded (its time returned, 0 for a
// fresh start) and the plan printed.
double prepare_states(Run& r, TrainerState& state) {
  // replicated: the fp32 masters (and LoRA's frozen base, in the compute dtype) on the device; AdamW's state follows
  ModelStates::hold_frozen_in_compute_dtype(r.model);
  if (r.groups->sharding() == plan::Sharding::kNone) r.model->to(r.place.device);
  r.states = std::make_unique<ModelStates>(r.model, r.groups->loss(),
                                           AdamWOptions{r.o.beta1, r.o.beta2, r.o.eps, r.o.weight_decay});
  check_output(r.o, r.rank);
  r.world.barrier();
  state.options = to_json(r.o);
  state.data = shard::data_identity(r.data->manifest());
  double load_seconds = 0;
  if (r.from) {
    const auto t0 = std::chrono::steady_clock::now();
    const TrainerState loaded = load_checkpoint(*r.from, *r.states);
    load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.step = loaded.step;
    state.cursor = loaded.cursor;
    state.tokens_seen = loaded.tokens_seen;
    r.data->set_cursor(state.cursor);
    if (r.rank == 0) log_info("resumed from {} at step {}", r.from->string(), state.step);
  }
  if (r.rank == 0) print_plan(r, *r.data);
  if (r.rank == 0) fs::create_directories(r.o.output);
  r.world.barrier();
  return load_seconds;
}

// Rank 0's report of a step: metrics, the progress bar or the step line, the offload line after the first and the
// last step.
void report_step(const Run& r, const StepReport& rep, Metrics& metrics, std::optional<Progress>& bar) {
  metrics.write(rep);
  if (bar) bar->add(1, static_cast<std::uint64_t>(rep.tokens));
  else log_line(step_line(rep));
  if (rep.step == r.o.steps || rep.step == 1)
    if (const std::int64_t bytes = r.model->model->offloaded_bytes(); bytes > 0)
      log_info("checkpoint offload: {} bytes of layer inputs were in host memory in the last micro-batch; the copies "
               "back of {} of them were issued ahead", bytes, r.model->model->fetched_ahead());
}

// A test's hook, not a feature (tests/train/test_safety.py): with ULYSSES_TEST_PAUSE_AFTER_STEP=N rank 0 creates
// OUTPUT/paused-after-step-N once step N is reported and waits until the file is gone, so that a test changes what
// the run reads between two steps by its own hand instead of by timing luck. The other ranks wait in the next
// collective.
void pause_for_test(const Run& r, std::int64_t step) {
  static const char* const at = std::getenv("ULYSSES_TEST_PAUSE_AFTER_STEP");
  if (r.rank != 0 || at == nullptr || std::to_string(step) != at) return;
  const fs::path flag = r.o.output / fmt::format("paused-after-step-{}", step);
  std::ofstream(flag) << getpid() << "\n";
  while (fs::exists(flag)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The mean step time of this run so far (the ETA, the deadline).
struct Pace {
  double seconds = 0;
  std::int64_t steps = 0;
  double mean() const { return seconds / static_cast<double>(steps); }
};

// What rank 0 writes as the run goes: metrics.jsonl (and TensorBoard), and the progress bar on a terminal.
struct Reports {
  std::optional<Metrics> metrics;
  std::optional<Progress> bar;
};

void open_reports(const Run& r, const TrainerState& state, Reports& out) {
  if (r.rank != 0) return;
  // a fresh start drops what a run killed before its first checkpoint logged
  out.metrics.emplace(r.o.output / "metrics.jsonl", r.from ? state.step : 0, tensorboard_dir(r.o));
  if (isatty(STDERR_FILENO))
    out.bar.emplace("train", static_cast<std::uint64_t>(r.o.steps - state.step), "steps", "tokens");
}

// A non-finite step's verdict, said by rank 0 (the same on every rank: its numbers are). A stop is one error line,
// and from then on SIGTERM is ignored, as for bad input (srun --kill-on-bad-exit would turn exit 4 into 143).
void say_nonfinite(const Run& r, const FiniteGuard& guard, FiniteGuard::Verdict verdict, std::optional<Progress>& bar) {
  if (verdict == FiniteGuard::Verdict::kSkip) {
    if (r.rank == 0) log_info("warning: {}", guard.reason());
    return;
  }
  if (bar) bar->finish();
  if (r.rank == 0)
    fmt::print(stderr, "error: {} — HINT: the newest checkpoint under {} is the last good state: resume it with a "
               "lower --lr or --clip{}\n", guard.reason(), (r.o.output / "checkpoints").string(),
               r.o.on_nonfinite == "skip" ? "" : ", or pass --on-nonfinite skip");
  std::signal(SIGTERM, SIG_IGN);
}

// The loop from the state's step to --steps: step, evaluate when due, report, then stop (a signal, the job's end or
// a non-finite step), save when due. Returns the exit code.
int train_steps(Run& r, TrainerState& state, Reports& reports, Checkpointer& checkpointer) {
  const TrainOptions& o = r.o;
  const Schedule schedule{o.lr, o.min_lr_ratio, o.warmup, o.steps, decay_from_name(o.lr_decay)};
  Evaluator evaluator(o, r.valid ? &*r.valid : nullptr, r.layout, r.rank, r.groups->loss(), r.world, r.place.device);
  FiniteGuard guard(on_nonfinite_from_name(o.on_nonfinite), o.max_skipped_steps);
  Metrics* metrics = reports.metrics ? &*reports.metrics : nullptr;
  Pace pace;
  while (state.step < o.steps) {
    StepReport rep = train_step(r, *r.data, schedule, state.step + 1);
    pace.seconds += rep.seconds, ++pace.steps;
    rep.eta_seconds = pace.mean() * static_cast<double>(o.steps - rep.step);
    using Verdict = FiniteGuard::Verdict;
    const Verdict verdict = rep.nonfinite ? guard.judge(rep.step, rep.loss, rep.grad_norm) : Verdict::kStep;
    if (verdict != Verdict::kStop) {
      state.step = rep.step;
      state.cursor = r.data->cursor();
      if (verdict == Verdict::kStep) state.tokens_seen += rep.tokens;   // a skipped step trained on none
      if (evaluator.due(state.step)) evaluator.run(r.model, state.step, metrics);
    }
    if (r.rank == 0) report_step(r, rep, *metrics, reports.bar);
    pause_for_test(r, rep.step);
    if (rep.nonfinite) say_nonfinite(r, guard, verdict, reports.bar);
    if (verdict == Verdict::kStop) return kExitNonFinite;   // nothing evaluated, saved or pruned on it
    const bool signalled = any_rank(stop_requested(), r.world);
    const double next_seconds = pace.mean() + (evaluator.due(state.step + 1) ? evaluator.seconds() : 0);
    const bool late = !signalled && state.step < o.steps && checkpointer.late(next_seconds);
    checkpointer.after_step(*r.states, state, signalled || late);
    if ((signalled || late) && state.step < o.steps) {
      checkpointer.say_stopped(state.step, late);
      return kExitPreempted;
    }
  }
  if (reports.bar) reports.bar->finish();
  if (r.rank == 0) log_info("done: {} steps, {} tokens trained", state.step, state.tokens_seen);
  return kExitOk;
}

// Some rank's loader refused a micro-batch's data (that rank's line is printed: train/step.hpp): the steps this run
// made since its start or its last save are saved first, so that none is lost once the dataset is restored; exit 2.
int stop_on_refused_data(Run& r, const TrainerState& state, std::int64_t first_step, Checkpointer& checkpointer,
                         std::optional<Progress>& bar) {
  if (bar) bar->finish();
  const bool save = checkpointer.saves() && state.step > std::max(first_step, checkpointer.saved_step());
  if (save) checkpointer.after_step(*r.states, state, /*stop=*/true);
  if (r.rank == 0)
    log_info("stopped after step {} on the data refused above: {}; restore the dataset, then resume (--resume auto)",
             state.step, save ? "its checkpoint is saved" : "nothing new to save");
  return kExitBadInput;
}

// train_steps, ended early by refused data (stop_on_refused_data). Returns the exit code.
int train(Run& r, TrainerState& state, Reports& reports, Checkpointer& checkpointer) {
  const std::int64_t first_step = state.step;
  try {
    return train_steps(r, state, reports, checkpointer);
  } catch (const DataRefused&) {
    return stop_on_refused_data(r, state, first_step, checkpointer, reports.bar);
  }
}

}  // namespace

void check_world_for_sp(const TrainOptions& o, int world) {
  if (o.sp < 1 || world % o.sp == 0) return;
  std::optional<arch::ModelConfig> config;
  try {
    config = arch::read_model_config(model_config_path(o), o.rope);
  } catch (const std::exception&) {   // no model named (--resume), or one that start-up will refuse in its turn
  }
  if (config) plan::check_sp_for_world(*config, world, static_cast<int>(o.sp));
}

int run_training(const TrainOptions& o, const dist::ProcessGroups& groups, comm::Communicator& world) {
  if (o.data.empty() || o.output.empty())
    throw BadInput(fmt::format("--{} is required to train", o.data.empty() ? "data" : "output"),
                   "pass --data PACKED_DIR --output RUN_DIR (only --calibrate-memory runs without them)");
  std::optional<Placement> placed = place_ranks(o, groups, world);
  if (!placed) return kExitBadInput;
  Run r{o, groups.layout(), groups.rank(), world, std::move(*placed)};
  if (!make_groups(r, groups)) return kExitBadInput;
  if (bad_input_on_any_rank(world, r.rank, [&] { lock_output(r); }) || !choose_checkpoint(r)) return kExitBadInput;
  // The model (heads against --sp), the data (S against --sp, vocabulary), the memory plan and the weights are
  // checked on every rank: a bad one ends all ranks with exit 2 and the first failing rank's line, no MPI_Abort to
  // swallow it. --dry-run stops before the model is built: its plan comes from the model description alone.
  if (bad_input_on_any_rank(world, r.rank, [&] {
        read_model(r);
        open_data(r);
        check_memory(r);
        if (!o.dry_run) build_model(r);
      }))
    return kExitBadInput;
  if (o.resume == "auto" && r.rank == 0)
    log_info("--resume auto: {}", r.from ? fmt::format("found {} (its files match its manifest)", r.from->string())
                                         : fmt::format("no checkpoint under {}: starting fresh",
                                                       (o.output / "checkpoints").string()));
  if (o.dry_run) return dry_run(r);
  TrainerState state;
  const double load_seconds = prepare_states(r, state);
  Reports reports;
  open_reports(r, state, reports);
  if (state.step < o.steps && any_rank(stop_requested(), world)) {
    if (r.rank == 0) log_info("stop signal during start-up: exiting with code {} before the first step, nothing new to "
                              "save (resume with --resume auto)", static_cast<int>(kExitPreempted));
    return kExitPreempted;
  }
  Checkpointer checkpointer(o, r.layout, r.config_text, r.config.architecture, world, r.rank, r.end);
  checkpointer.loaded(load_seconds);
  return train(r, state, reports, checkpointer);
}

}  // namespace ulysses::train

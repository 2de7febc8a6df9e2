#include "train/trainer.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <thread>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <ATen/Parallel.h>
#include <fmt/ranges.h>

#include "comm/backend.hpp"
#include "core/error.hpp"
#include "core/gpu_fabric.hpp"
#include "core/json_input.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "core/sequence_parallel.hpp"
#include "core/topology.hpp"
#include "data/loader.hpp"
#include "dist/check_mpi.hpp"
#include "dist/mpi_world.hpp"
#include "dist/watchdog.hpp"
#include "io/checkpoint_format.hpp"
#include "model/causal_lm.hpp"
#include "model/document_attention.hpp"
#include "model/options.hpp"
#include "model/precision.hpp"
#include "model/weights.hpp"
#include "plan/fit_check.hpp"
#include "plan/memory_model.hpp"
#include "plan/plan_report.hpp"
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/device.hpp"
#include "train/model_states.hpp"
#include "train/report.hpp"
#include "train/schedule.hpp"
#include "train/signals.hpp"
#include "train/step.hpp"

namespace fs = std::filesystem;

namespace ulysses::train {
namespace {

// Every rank's `mine` (at most MPI_MAX_PROCESSOR_NAME bytes kept), gathered so all ranks hold the list, in rank order.
std::vector<std::string> gather_text(comm::Communicator& world, const std::string& mine) {
  constexpr std::int64_t kWidth = MPI_MAX_PROCESSOR_NAME + 1;
  torch::Tensor record = torch::zeros({kWidth}, torch::kUInt8);   // [kWidth] bytes, NUL-terminated
  std::memcpy(record.data_ptr(), mine.data(), std::min<std::size_t>(mine.size(), kWidth - 1));
  const torch::Tensor all = world.size() > 1 ? world.all_gather(record) : record;   // [world * kWidth]
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) out.emplace_back(static_cast<const char*>(all.data_ptr()) + kWidth * r);
  return out;
}

// The lowest world rank on this machine: the ranks that MPI_COMM_TYPE_SHARED groups share memory, whatever the
// environment variables they inherited say.
int machine_leader() {
  int rank = 0, leader = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm shared = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
  CHECK_MPI(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, shared));
  MPI_Comm_free(&shared);
  return leader;
}

// Every rank's view of where it runs (host, SLURM_NODEID, the launcher's local rank), gathered so all ranks
// hold the table.
std::vector<RankSelf> gather_rank_selves(comm::Communicator& world) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  const RankSelf self = rank_self_from_env(std::string(name, static_cast<std::size_t>(len)));
  const std::vector<std::string> hosts = gather_text(world, self.host);
  torch::Tensor ids = torch::tensor({self.node, self.local_rank, machine_leader()}, torch::kInt);   // [3]
  if (world.size() > 1) ids = world.all_gather(ids);                                                 // [world * 3]
  std::vector<RankSelf> out;
  for (int r = 0; r < world.size(); ++r)
    out.push_back({hosts[static_cast<std::size_t>(r)], ids[3 * r].item<int>(), ids[3 * r + 1].item<int>(),
                   ids[3 * r + 2].item<int>()});
  return out;
}

constexpr double kNoEnd = std::numeric_limits<double>::infinity();   // no job end known

// True when any rank passes true (one signalled rank stops all).
bool any_rank(bool flag, comm::Communicator& world) {
  torch::Tensor t = torch::tensor({flag ? std::int64_t{1} : std::int64_t{0}});
  if (world.size() > 1) world.all_reduce_sum(t);
  return t.item<std::int64_t>() > 0;
}

// Runs check on every rank; when it throws BadInput on any rank, the lowest such rank prints its line and
// every rank learns of it (true): they all exit 2 together instead of aborting or waiting in a collective.
// From then on a rank ignores SIGTERM: under `srun --kill-on-bad-exit` the first rank to exit makes srun
// terminate the others, which would turn their exit 2 into 143 (and the job's code with it).
bool bad_input_on_any_rank(comm::Communicator& world, int rank, const std::function<void()>& check) {
  std::optional<std::string> why;
  try {
    check();
  } catch (const BadInput& e) {
    why = one_line(e);
  }
  torch::Tensor failed = torch::tensor({why ? std::int64_t{1} : std::int64_t{0}});   // [1]
  torch::Tensor all = world.size() > 1 ? world.all_gather(failed) : failed;            // [world]
  const auto first = all.nonzero();                                                    // [failing ranks, 1]
  if (first.size(0) == 0) return false;
  if (first[0][0].item<std::int64_t>() == rank) fmt::print(stderr, "[rank {}] error: {}\n", rank, *why);
  std::signal(SIGTERM, SIG_IGN);   // exiting 2 anyway, within moments
  return true;
}

// Before NCCL's init, which would fail late and cryptically: one GPU per rank, and the NCCL found at run time.
// Every rank takes part (CPU ranks give no bus id); true when a rank's check failed (bad_input_on_any_rank).
bool bad_gpus_for_nccl(const Topology& topo, comm::Communicator& world, int rank, const c10::Device& device,
                       comm::Backend backend) {
  std::vector<std::string> nodes;
  for (int g = 0; g < topo.world(); ++g)
    nodes.push_back(fmt::format("node {} ({})", topo.place(g).node, topo.place(g).host));
  const std::vector<std::string> gpus = gather_text(world, device_bus_id(device));
  std::string newer;
  if (bad_input_on_any_rank(world, rank, [&] {
        if (backend != comm::Backend::kNccl) return;
        check_one_rank_per_gpu(nodes, gpus);
        newer = comm::check_nccl_at_run_time();
      }))
    return true;
  if (rank == 0 && !newer.empty()) log_info("{}", newer);
  return false;
}

double max_over_ranks(double value, comm::Communicator& world) {
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  if (world.size() > 1) t = world.all_gather(t);
  return t.max().item<double>();
}

model::ModelOptions model_options(const plan::Features& f, model::Precision precision, const c10::Device& device) {
  return model::ModelOptions()
      .precision(precision)
      .prefetch(f.prefetches(device.is_cuda()))
      .activation_checkpointing(f.activation_checkpointing)
      .offload_checkpoints(f.offload_checkpoints)
      .mlp_tile_tokens(f.mlp_tile_tokens)
      .logits_chunk_tokens(f.logits_chunk_tokens);
}

struct Run {
  const TrainOptions& o;
  const RankLayout& layout;
  const Topology& topo;
  int rank;
  comm::Communicator& world;   // control messages over MPI: CPU tensors (flags, maxima, the rank table)
  c10::Device device;
  model::Precision precision;
  comm::Backend backend;
  std::unique_ptr<comm::Communicator> sp_group, grad_group;   // on the device's backend
  std::unique_ptr<comm::Communicator> dp_group;               // hybrid_shard only: replicas of a shard
  std::unique_ptr<comm::Communicator> gather_group;           // hybrid_shard + prefetch over NCCL: the SP group again
  plan::Sharding sharding = plan::Sharding::kNone;
  int shards = 0;                                             // ranks a shard group has (0: replicated)
  plan::Features features;                                    // the memory flags, resolved
  SequenceParallel sp;                                        // this rank's SP group (sp_group inside)
  std::optional<double> peak_tflops;                          // per device, for MFU
  arch::ModelConfig config;
  fs::path config_path;
  model::ModelOptions options;
  plan::MemoryPlan memory;                                    // this rank's memory plan (nothing built)
  std::int64_t valid_sequences = 0;                           // the validation split's (--eval-every)
  model::CausalLm model{nullptr};                             // not built by --dry-run
  std::unique_ptr<ModelStates> states;
};

// Where the shards go: every rank (full), or the SP group with the DP replicas all-reducing (hybrid).
model::Sharding sharding_of(const Run& r) {
  switch (r.sharding) {
    case plan::Sharding::kFull: return {r.grad_group.get(), nullptr, r.device, r.features.offload_optimizer};
    case plan::Sharding::kHybrid:
      return {r.sp_group.get(), r.dp_group.get(), r.device, r.features.offload_optimizer, r.gather_group.get()};
    case plan::Sharding::kNone: break;
  }
  return {};
}

void print_plan(const Run& r, const data::DataLoader& loader) {
  log_line(topology_line(r.layout, r.topo, std::getenv("SLURM_NTASKS")));
  if (r.o.dry_run || r.layout.world() <= kFullRankMapUpTo) {
    for (const auto& line : rank_map_lines(r.layout, r.topo)) log_line(line);
  } else {
    log_info("rank map: {} ranks, printed by --dry-run", r.layout.world());
  }
  log_info("model {}: {} parameters, {} layers, {} heads ({} KV), hidden {}", r.config.architecture,
           arch::parameter_count(r.config), r.config.num_layers, r.config.num_heads, r.config.num_kv_heads, r.config.hidden_size);
  log_info("data {}: {} train sequences of {} tokens; {} sequences per step (dp {} × micro {} × accum {})",
           r.o.data.string(), loader.num_sequences(), loader.seq_len(), loader.sequences_per_step(), r.layout.dp(),
           r.o.micro_batch, r.o.grad_accum);
  log_info("device {}; precision {}; collectives {}{}", device_line(r.device), r.o.memory.precision,
           comm::backend_name(r.backend),
           r.backend == comm::Backend::kMpi && r.device.is_cuda() ? " (CUDA tensors staged through host memory)" : "");
  const arch::UlyssesHeads heads = arch::ulysses_heads(r.config, r.sp.degree());
  if (r.o.dry_run && r.device.is_cuda())
    log_info("attention: the kernel is chosen on the GPU at start-up (a dry run touches no GPU)");
  else
    log_info("attention: {}", model::attention_kernel(r.device, model::compute_dtype(r.precision), heads.q, heads.kv,
                                                      r.config.head_dim, r.config.sliding_window.has_value()));
  const std::int64_t chunk = r.options.logits_chunk_tokens();
  const model::ModelOptions& mo = r.options;
  log_info("activations: {}{}", mo.activation_checkpointing()
                                    ? "checkpointed per decoder layer (inputs kept, each layer recomputed in backward)"
                                    : "every layer's intermediates kept for backward",
           mo.mlp_tile_tokens() > 0 ? fmt::format("; MLP in tiles of {} tokens", mo.mlp_tile_tokens()) : "");
  if (mo.offload_checkpoints() > 0)
    log_info("checkpoint offload: the inputs of {} of {} layers go to host memory ({})",
             std::min(mo.offload_checkpoints(), r.config.num_layers), r.config.num_layers,
             r.device.is_cuda() ? "copied on a side stream" : "copied at once: no streams on a CPU");
  if (mo.prefetch() && (r.sharding != plan::Sharding::kNone || mo.offload_checkpoints() > 0))
    log_info("prefetch: {}{}", r.sharding != plan::Sharding::kNone ? "the next unit's all-gather is issued ahead" : "",
             mo.offload_checkpoints() > 0
                 ? fmt::format("{}the previous layer's offloaded input is copied back ahead in backward",
                               r.sharding != plan::Sharding::kNone ? "; " : "")
                 : std::string());
  log_info("loss: {}", chunk > 0 ? fmt::format("tiled logits, {} tokens per chunk ({:.2f} GiB of fp32 logits)", chunk,
                                               4.0 * static_cast<double>(chunk) *
                                                   static_cast<double>(r.config.vocab_size) / (1 << 30))
                                 : std::string("whole logits ([S/P, vocab] fp32 per micro-batch)"));
  if (r.peak_tflops)
    log_info("MFU against {:.1f} TFLOPS per device{}", *r.peak_tflops,
             r.o.peak_tflops > 0                          ? " (--peak-tflops)"
             : r.precision == model::Precision::kBf16 ? " (dense bf16 peak of this GPU)"
                                                          : " (FP32 peak of this GPU: fp32 matmuls do not use TF32)");
  log_info("memory: {}", plan::features_line(r.features, r.config, r.memory.layout));
  log_info("memory plan at S = {} (profile {}: {}):", loader.seq_len(), r.memory.profile.name, r.memory.profile.source);
  for (const auto& line : plan::breakdown_lines(r.memory.breakdown, r.memory.layout, r.memory.machine))
    log_info("  {}", line);
  if (r.o.eval_every > 0)
    log_info("eval: every {} steps and at the end, on {} validation sequence(s)", r.o.eval_every,
             r.o.eval_sequences > 0 ? std::min(r.o.eval_sequences, r.valid_sequences) : r.valid_sequences);
  const auto events = tensorboard_dir(r.o);
  const std::string checkpoints =
      r.o.save_every < 0 ? "no checkpoints (--save-every -1), "
                         : fmt::format("{}/checkpoints/step-NNNNNNN ({}at the end and on a stop signal), ",
                                       r.o.output.string(),
                                       r.o.save_every > 0 ? fmt::format("every {} steps, ", r.o.save_every) : "");
  log_info("writes: {}{}/metrics.jsonl{}", checkpoints, r.o.output.string(),
           events ? ", TensorBoard events in " + events->string() : "");
}

// One optimizer step; returns the report (loss over all ranks).
StepReport train_step(Run& r, data::DataLoader& loader, const Schedule& schedule, std::int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const LossTotals totals = compute_gradients(r.model, loader, r.o.grad_accum, *r.states, r.device);
  StepReport rep;
  rep.grad_norm = r.states->clip(r.o.clip);
  rep.lr = schedule.lr_at(step);
  r.states->step(rep.lr);
  synchronize(r.device);   // the step's time includes the optimizer's kernels
  loader.advance_step();
  rep.step = step;
  rep.steps = r.o.steps;
  rep.loss = totals.mean();
  rep.tokens = static_cast<std::int64_t>(totals.count);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens = static_cast<double>(loader.sequences_per_step() * loader.seq_len());
  rep.tokens_per_s = tokens / rep.seconds;
  rep.tflops = plan::step_flops(r.config, tokens, totals.attention_pairs) / rep.seconds / 1e12;
  rep.tflops_per_device = rep.tflops / r.layout.world();
  if (r.peak_tflops) rep.mfu = rep.tflops_per_device / *r.peak_tflops;
  rep.peak_mib = max_over_ranks(peak_rss_mib(), r.world);
  if (auto gpu = peak_gpu_mib(r.device)) rep.peak_gpu_mib = max_over_ranks(*gpu, r.world);
  return rep;
}

// The options of the run a checkpoint continues (its trainer_state.json) against this one's: rank 0 lists every
// difference; those that change which data each step sees — the dataset, the seed, the sequences per step — end
// the run unless --allow-changes (the schedule's may change: extending --steps or lowering --lr is a choice).
void check_resume_changes(const TrainOptions& o, const fs::path& from, std::int64_t dp, bool speak) {
  const fs::path state_path = from / checkpoint::kTrainerState;
  const nlohmann::json stored = read_trainer_state(state_path).options;   // checked: a damaged file is one line here
  if (stored.empty()) return;   // a checkpoint made by import-hf: no run to continue
  const auto stored_count = [&](const char* key, std::int64_t fallback) {
    return stored.contains(key) ? json_value<std::int64_t>(stored.at(key), fmt::format("{}: options.{}", state_path.string(),
                                                                                       key),
                                                           checkpoint::kDamagedHint)
                                : fallback;
  };
  const nlohmann::json now = to_json(o);
  std::vector<std::string> changes, order;
  for (const char* key : {"data", "seed", "lr", "min_lr_ratio", "warmup", "lr_decay", "steps", "weight_decay", "beta1",
                          "beta2", "eps", "clip"})
    if (stored.contains(key) && stored[key] != now[key]) {
      (std::string_view(key) == "data" || std::string_view(key) == "seed" ? order : changes)
          .push_back(fmt::format("{} {} → {}", key, stored[key].dump(), now[key].dump()));
    }
  const checkpoint::Manifest m = checkpoint::read_manifest(from);
  const std::int64_t before = m.dp * stored_count("micro_batch", o.micro_batch) * stored_count("grad_accum", o.grad_accum);
  if (const std::int64_t after = dp * o.micro_batch * o.grad_accum; before != after)
    order.push_back(fmt::format("sequences per step {} → {} (dp × micro-batch × grad-accum)", before, after));
  if (!order.empty() && !o.allow_changes)
    throw BadInput(fmt::format("--resume {}: the data each step sees would change: {}", from.string(),
                               fmt::join(order, "; ")),
                   "pass --allow-changes to continue anyway (the run is then no longer an exact continuation)");
  if (speak && !changes.empty()) log_info("resume changes: {}", fmt::join(changes, "; "));
  if (speak && !order.empty()) log_info("resume changes (--allow-changes): {}", fmt::join(order, "; "));
}

std::optional<fs::path> resume_from(const TrainOptions& o) {
  if (o.resume == "auto") return checkpoint::latest(o.output / "checkpoints");
  if (o.resume.empty()) return std::nullopt;
  if (auto dir = checkpoint::find_checkpoint(o.resume)) return dir;
  throw BadInput(fmt::format("--resume {} is not a checkpoint: no {} and no {}", o.resume, checkpoint::kManifest,
                             checkpoint::kLatest),
                 "pass auto, a run directory, its checkpoints/ or latest, or a step-NNNNNNN directory");
}

void check_output(const TrainOptions& o, int rank) {
  const fs::path ckpts = o.output / "checkpoints";
  if (o.resume.empty() && !o.overwrite && fs::exists(ckpts / checkpoint::kLatest))
    throw BadInput(fmt::format("{} already holds checkpoints", o.output.string()),
                   "pass --resume auto to continue that run, --overwrite to start over, or another --output");
  if (rank == 0 && o.overwrite && o.resume.empty() && fs::exists(o.output)) {
    fs::remove_all(ckpts);
    fs::remove(o.output / "metrics.jsonl");
    fs::remove_all(o.output / "tensorboard");   // the default folder only: a --tensorboard elsewhere may be shared
  }
}

}  // namespace

int run_training(const TrainOptions& o, const dist::ProcessGroups& groups, comm::Communicator& world) {
  if (o.data.empty() || o.output.empty())
    throw BadInput(fmt::format("--{} is required to train", o.data.empty() ? "data" : "output"),
                   "pass --data PACKED_DIR --output RUN_DIR (only --calibrate-memory runs without them)");
  const RankLayout& layout = groups.layout();
  const std::vector<RankSelf> selves = gather_rank_selves(world);
  std::optional<Topology> placed;
  std::optional<c10::Device> device;
  std::optional<comm::Backend> backend;
  std::optional<model::Precision> precision;
  // Layout and device checks end every rank with exit 2 and one line, without MPI_Abort (srun shows 2).
  if (bad_input_on_any_rank(world, groups.rank(), [&] {
        placed.emplace(selves, o.island_size);
        device = choose_device(o.device, placed->place(groups.rank()).local_rank);
        backend = comm::choose_backend(o.comm, *device);
        int granted = MPI_THREAD_SINGLE;
        MPI_Query_thread(&granted);
        dist::check_thread_level(granted,
                                 dist::required_thread_level(device->is_cuda(), *backend == comm::Backend::kNccl),
                                 fmt::format("--device {} --comm {}", device->str(), comm::backend_name(*backend)));
        precision = model::precision_from_name(o.memory.precision);
      }))
    return kExitBadInput;
  // The NVLink islands as the GPUs report them (GB200 NVL72), where they do, before the SP groups are checked.
  const std::string island_note = placed->measure_islands(gather_text(world, gpu_fabric_id(device_bus_id(*device))));
  if (bad_input_on_any_rank(world, groups.rank(),
                            [&] { check_sp_within_islands(layout, *placed, o.allow_sp_across_islands); }))
    return kExitBadInput;
  const Topology& topo = *placed;
  if (groups.rank() == 0 && !island_note.empty()) log_info("warning: {}", island_note);
  if (groups.rank() == 0 && !topo.local_rank_warning().empty()) log_info("warning: {}", topo.local_rank_warning());
  if (bad_gpus_for_nccl(topo, world, groups.rank(), *device, *backend)) return kExitBadInput;
  const int ranks_here = topo.ranks_on_node(topo.place(groups.rank()).node);
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here));
  // A dry run touches no GPU (no context, no NCCL communicator): its groups are MPI ones, never used for tensors.
  if (!o.dry_run) use_device(*device);
  Run r{o, layout, topo, groups.rank(), world, *device, *precision, *backend};
  const comm::Backend made = o.dry_run ? comm::Backend::kMpi : r.backend;
  const std::chrono::seconds timeout(o.comm_timeout);
  r.sp_group = comm::make_communicator(made, groups.sp(), r.device, timeout);
  r.grad_group = comm::make_communicator(made, groups.world(), r.device, timeout);
  r.peak_tflops = o.peak_tflops > 0   ? std::optional<double>(o.peak_tflops)
                  : r.device.is_cuda() ? known_peak_tflops(device_name(r.device), r.precision == model::Precision::kBf16)
                                       : std::nullopt;
  r.sp = SequenceParallel(layout, r.rank, r.sp_group.get());
  if (bad_input_on_any_rank(world, groups.rank(), [&] {
        r.sharding = plan::resolve_sharding(o.memory, layout.world());
      }))
    return kExitBadInput;
  if (r.sharding == plan::Sharding::kHybrid)
    r.dp_group = comm::make_communicator(made, groups.dp(), r.device, timeout);
  if (r.sharding == plan::Sharding::kHybrid && made == comm::Backend::kNccl &&
      plan::prefetches(o.memory.prefetch, r.device.is_cuda()))
    r.gather_group = comm::make_communicator(made, groups.sp(), r.device, timeout);
  r.shards = plan::shard_ranks(r.sharding, layout.world(), layout.sp());
  std::optional<data::DataLoader> dataset, valid;   // valid: --eval-every's split
  std::optional<fs::path> from;   // the checkpoint --resume names (nullopt: a fresh start)
  std::optional<double> end;      // the job's end (--end-time, SLURM_JOB_END_TIME), seconds since the epoch
  // The model (heads against --sp), the data (S against --sp, vocabulary) and the weights are checked on every
  // rank: a bad one ends all ranks with exit 2 and the first failing rank's line, no MPI_Abort to swallow it.
  // --dry-run stops before the model is built: its plan comes from the model description alone.
  if (bad_input_on_any_rank(world, groups.rank(), [&] {
        from = resume_from(o);
        end = job_end_time(o.end_time);
        if (from) check_resume_changes(o, *from, layout.dp(), r.rank == 0);
        r.config_path = model_config_path(o, from);
        r.config = arch::read_model_config(r.config_path);
        arch::check_heads_for_sp(r.config, r.sp.degree(), r.config_path.string());
        r.features = plan::resolve(o.memory, r.config, layout.world());
        r.options = model_options(r.features, r.precision, r.device);
        dataset.emplace(o.data, data::LoaderOptions{r.sp, layout.dp(), layout.dp_rank(r.rank), o.micro_batch,
                                                    o.grad_accum, o.seed, r.config.vocab_size, "train"});
        if (o.eval_every > 0)
          r.valid_sequences = valid.emplace(o.data, data::LoaderOptions{r.sp, layout.dp(), layout.dp_rank(r.rank), 1,
                                                                        1, o.seed, r.config.vocab_size, "valid"})
                                  .num_sequences();
        const int world = layout.world();
        const plan::Layout where{world % ranks_here == 0 ? world / ranks_here : topo.num_nodes(), ranks_here,
                                 layout.sp(), o.micro_batch};
        const bool cuda = r.device.is_cuda();
        r.memory = plan::check_memory_fits(r.config, o.memory, where,
                                           {cuda, device_name(r.device), cuda ? device_memory_bytes(r.device) : 0},
                                           o.memory_profile, dataset->seq_len(), !o.ignore_memory_plan);
        if (topo.place(r.rank).local_rank == 0 && !r.memory.unfit.empty())   // each node's plan, by its first rank
          log_info("warning: running anyway (--ignore-memory-plan): {}", r.memory.unfit);
        if (o.dry_run) return;
        r.model = model::CausalLm(r.config, r.sp, r.options, sharding_of(r));
        if (o.init_from.empty()) model::init_weights(r.model, o.seed);
        else model::load_hf_weights(r.model, o.init_from);
      }))
    return kExitBadInput;
  data::DataLoader& loader = *dataset;
  const fs::path ckpts = o.output / "checkpoints";
  if (o.resume == "auto" && r.rank == 0)
    log_info("--resume auto: {}", from ? fmt::format("found {}", from->string())
                                       : fmt::format("no checkpoint under {}: starting fresh", ckpts.string()));
  if (o.dry_run) {   // the checks a real run makes first, without touching anything
    if (!o.overwrite) check_output(o, r.rank);
    if (r.rank == 0) {
      print_plan(r, loader);
      if (from) {
        const checkpoint::Manifest m = checkpoint::read_manifest(*from);
        log_info("would resume from {}: step {}, written at world {} = sp {} x dp {}, {} states", from->string(), m.step,
                 m.world, m.sp, m.dp, m.optimizer_layout);
      }
      end_dry_run();
    }
    if (any_rank(stop_requested(), world)) {   // Slurm's one warning would be lost with this step
      if (r.rank == 0) log_info("stop signal during the dry run: exiting with code {}", static_cast<int>(kExitPreempted));
      return kExitPreempted;
    }
    return kExitOk;
  }
  if (r.sharding == plan::Sharding::kNone) r.model->to(r.device);   // fp32 master weights; AdamW's state follows
  r.states =
      std::make_unique<ModelStates>(r.model, *r.grad_group, AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
  Schedule schedule{o.lr, o.min_lr_ratio, o.warmup, o.steps, decay_from_name(o.lr_decay)};
  check_output(o, r.rank);
  world.barrier();

  TrainerState state;
  state.options = to_json(o);
  double save_seconds = 0;   // the last save's, for the deadline; until there is one, the load's
  if (from) {
    const auto t0 = std::chrono::steady_clock::now();
    TrainerState loaded = load_checkpoint(*from, *r.states);
    save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.step = loaded.step;
    state.cursor = loaded.cursor;
    state.tokens_seen = loaded.tokens_seen;
    loader.set_cursor(state.cursor);
    if (r.rank == 0) log_info("resumed from {} at step {}", from->string(), state.step);
  }
  if (r.rank == 0) print_plan(r, loader);

  if (r.rank == 0) fs::create_directories(o.output);
  world.barrier();
  std::optional<Metrics> metrics;
  if (r.rank == 0)   // a fresh start drops what a run killed before its first checkpoint logged
    metrics.emplace(o.output / "metrics.jsonl", from ? state.step : 0, tensorboard_dir(o));
  const bool tty = r.rank == 0 && isatty(STDERR_FILENO);
  std::optional<Progress> bar;
  if (tty) bar.emplace("train", static_cast<std::uint64_t>(o.steps - state.step), "steps", "tokens");

  // A save that hangs (one rank's file system stuck, its peers waiting for it in MPI) ends the job after
  // --save-timeout with one line, instead of holding every rank until the time limit.
  dist::Watchdog save_watch(std::chrono::seconds(o.save_timeout), "--save-timeout", dist::abort_job,
                            std::chrono::seconds(1));
  auto save = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    dist::Watchdog::Call watched =
        save_watch.begin(fmt::format("the checkpoint save of step {} (every rank's writes, then a barrier)", state.step));
    const fs::path dir = save_checkpoint(ckpts, *r.states, state, layout, r.config_path, r.config.architecture,
                                         o.keep_last, world);
    if (r.rank == 0) log_info("saved {}", dir.string());
    world.barrier();
    watched.issued([] { return dist::Probe{dist::Probe::State::kDone, ""}; });
    save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (state.step < o.steps && any_rank(stop_requested(), world)) {
    if (r.rank == 0) log_info("stop signal during start-up: exiting with code {} before the first step, nothing new to "
                              "save (resume with --resume auto)", static_cast<int>(kExitPreempted));
    return kExitPreempted;
  }
  // One end for all ranks (the earliest), so that they all take the deadline's collective below or none does.
  if (const double earliest = -max_over_ranks(end ? -*end : -kNoEnd, world); earliest < kNoEnd) end = earliest;
  else end.reset();
  const bool saves = o.save_every >= 0;   // -1: never
  if (end && r.rank == 0)
    log_info("the job ends in {:.0f} s: the run {}exits {} once a step and a save would end within {:.0f} s of it "
             "(--stop-margin)", *end - now_since_epoch(), saves ? "saves and " : "", static_cast<int>(kExitPreempted),
             o.stop_margin);
  double run_seconds = 0;   // this run's steps, for the ETA
  std::int64_t run_steps = 0;
  double eval_seconds = 0;   // the last evaluation's, for the deadline
  while (state.step < o.steps) {
    StepReport rep = train_step(r, loader, schedule, state.step + 1);
    run_seconds += rep.seconds, ++run_steps;
    rep.eta_seconds = run_seconds / static_cast<double>(run_steps) * static_cast<double>(o.steps - rep.step);
    state.step = rep.step;
    state.cursor = loader.cursor();
    state.tokens_seen += rep.tokens;
    if (o.eval_every > 0 && (rep.step % o.eval_every == 0 || rep.step == o.steps)) {
      const auto t0 = std::chrono::steady_clock::now();
      const LossTotals eval = evaluate(r.model, *valid, o.eval_sequences, layout.dp(), layout.dp_rank(r.rank),
                                       *r.grad_group, r.device);
      if (r.rank == 0) {
        log_info("eval at step {}: loss {:.4f}, perplexity {:.3f} ({} target tokens)", rep.step, eval.mean(),
                 std::exp(eval.mean()), static_cast<std::int64_t>(eval.count));
        metrics->write_eval(rep.step, eval.mean(), eval.count);
      }
      eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (r.rank == 0) {
      metrics->write(rep);
      if (bar) bar->add(1, static_cast<std::uint64_t>(rep.tokens));
      else log_line(step_line(rep));
      if (rep.step == o.steps || state.step == 1)
        if (const std::int64_t bytes = r.model->model->offloaded_bytes(); bytes > 0)
          log_info("checkpoint offload: {} bytes of layer inputs were in host memory in the last micro-batch; the "
                   "copies back of {} of them were issued ahead", bytes, r.model->model->fetched_ahead());
    }
    const bool signalled = any_rank(stop_requested(), world);
    const bool next_evaluates = o.eval_every > 0 && ((state.step + 1) % o.eval_every == 0 || state.step + 1 == o.steps);
    const double next_seconds = run_seconds / static_cast<double>(run_steps) + (next_evaluates ? eval_seconds : 0);
    const bool late = !signalled && end && state.step < o.steps &&
                      any_rank(past_deadline(now_since_epoch(), *end, next_seconds, save_seconds, o.stop_margin), world);
    const bool stop = signalled || late;
    if (saves && (stop || state.step == o.steps || (o.save_every > 0 && state.step % o.save_every == 0))) save();
    if (stop && state.step < o.steps) {
      if (r.rank == 0)
        log_info("{}: {} at step {}, exiting with code {}{}",
                 late ? fmt::format("the job ends in {:.0f} s (--stop-margin {:.0f})", *end - now_since_epoch(),
                                    o.stop_margin)
                      : "stop signal received",
                 saves ? "saved" : "not saved (--save-every -1)", state.step, static_cast<int>(kExitPreempted),
                 saves ? " (resume with --resume auto)" : "");
      return kExitPreempted;
    }
  }
  if (bar) bar->finish();
  if (r.rank == 0) log_info("done: {} steps, {} tokens trained", state.step, state.tokens_seen);
  return kExitOk;
}

}  // namespace ulysses::train

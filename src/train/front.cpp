// ulysses-train: what users start (mpiexec, srun --mpi=pmi2, launch/local.sh, the sbatch files). A front without
// LibTorch or MPI: it parses the command line (train/cli.hpp; --help, --print-config and bad flags end here) and,
// where the run's device is certainly this host's CPU and the launcher says that every rank runs on this node
// (core/launch_env.hpp), checks the memory plan exactly as the trainer would (plan/fit_check.hpp; not with
// --ignore-memory-plan, where the trainer warns instead). A run that cannot fit ends here, exit 2, in a few MiB and
// milliseconds per rank instead of the ~480 MiB and seconds LibTorch costs each rank before main: 8 ranks of an 8B
// config on a 24 GiB node are refused without pushing it into swap.
// Before it refuses, the front makes the checks the trainer makes ahead of its plan (the job's end, the heads, the
// data against --sp and the vocabulary): where one fails, the trainer names it.
//
// One line for the job: rank 0 writes it; the others wait a moment before they exit, so that a launcher which
// ends the job at the first failed rank does not kill rank 0 first. The ranks do not talk: they agree because they
// read the same files and the same memory figures moments apart. Should a file change or fail to read between
// them (some ranks refuse, others start the trainer), the trainer's ranks wait in MPI_Init for the missing ones
// until ULYSSES_INIT_TIMEOUT (600 s by default; dist/mpi_world.hpp) ends each with a line saying so.
//
// Everything else (the plan fits, or the front cannot be sure: a GPU, --resume, --calibrate-memory, an unknown
// launcher, ranks on other nodes, an input the trainer checks and names first) becomes ulysses-train-core, found
// beside this binary, by exec with the same argv: the same process, so launchers, signals, PIDs and exit codes see
// no difference.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "arch/model_config.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/launch_env.hpp"
#include "core/rank_layout.hpp"
#include "core/sequence_parallel.hpp"
#include "data/loader.hpp"
#include "io/manifest.hpp"
#include "io/safetensors.hpp"
#include "plan/advice.hpp"
#include "plan/fit_check.hpp"
#include "train/cli.hpp"
#include "train/signals.hpp"

namespace fs = std::filesystem;
namespace ut = ulysses::train;

namespace {

constexpr const char* kCore = "ulysses-train-core";
constexpr std::chrono::milliseconds kRankZeroFirst{500};   // ranks > 0, before they exit with an error

// What --device would pick, when that is certainly the CPU: asked for, or auto where no GPU can be visible (a build
// without CUDA, or a host without NVIDIA's driver: no /dev/nvidiactl, nor WSL2's /dev/dxg).
bool certainly_cpu(const ut::TrainOptions& o) {
  return o.device == "cpu" ||
         (o.device == "auto" && (!ULYSSES_CUDA || (!fs::exists("/dev/nvidiactl") && !fs::exists("/dev/dxg"))));
}

// The world the trainer's check_world_size (dist/check_mpi.hpp) expects: --world, else SLURM_NTASKS, else any.
bool world_as_expected(const ut::TrainOptions& o, const ulysses::Environment& vars, int world) {
  if (o.world > 0) return o.world == world;
  const auto tasks = vars.find("SLURM_NTASKS");
  return tasks == vars.end() || tasks->second == std::to_string(world);
}

struct PlanInputs {   // every rank on this node
  ulysses::RankLayout ranks;
  fs::path config_path;
  ulysses::arch::ModelConfig config;
  ulysses::shard::Manifest data;   // --data's manifest.json, read once
  std::int64_t micro_batch = 1;
  ulysses::plan::Layout layout() const {
    return {.nodes = 1, .ranks_per_node = ranks.world(), .sp = ranks.sp(), .micro_batch = micro_batch,
            .ring = ranks.ring()};
  }
};

// What the trainer's refusal reads, read as the trainer reads it; nullopt where the front cannot be sure of it.
std::optional<PlanInputs> plan_inputs(const ut::TrainOptions& o, const ulysses::Environment& vars) {
  const std::optional<ulysses::LaunchEnv> env = ulysses::launch_env(vars);
  if (!env || env->ranks_on_node != env->world || !world_as_expected(o, vars, env->world) || !certainly_cpu(o) ||
      !o.calibrate_memory.empty() || !o.resume.empty() || o.data.empty() || o.output.empty() || o.comm == "nccl" ||
      o.island_size != 0)
    return std::nullopt;
  const ulysses::RankLayout ranks(env->world, static_cast<int>(o.sp), static_cast<int>(o.sp_ring));
  const fs::path config_path = ut::model_config_path(o);
  return PlanInputs{ranks, config_path, ulysses::arch::read_model_config(config_path, o.rope),
                    ulysses::shard::read_manifest(o.data), o.micro_batch};
}

// The checks the trainer makes before its plan, in its order (train/trainer.cpp): BadInput where one fails.
void check_as_the_trainer_would(const ut::TrainOptions& o, const PlanInputs& in, int rank) {
  ut::job_end_time(o.end_time);
  ulysses::arch::check_heads_for_sp(in.config, in.ranks.sp(), in.config_path.string(), in.ranks.ring());
  if (!o.init_from.empty()) static_cast<void>(ulysses::st::HfWeights(o.init_from));
  const std::string source = fmt::format("{} (packed for --sp {})", o.data.string(), in.data.sp);
  ulysses::plan::check_sp_for_length(in.config, in.ranks.world(), in.ranks.sp(), in.data.seq_len, source,
                                     in.ranks.ring());
  const ulysses::SequenceParallel sp(in.ranks, rank, nullptr);
  auto loader = [&](std::int64_t micro_batch, std::int64_t grad_accum, const char* split) {
    return ulysses::data::DataLoader(o.data, {sp, in.ranks.dp(), in.ranks.dp_rank(rank), micro_batch, grad_accum,
                                              o.seed, in.config.vocab_size, split});
  };
  loader(o.micro_batch, o.grad_accum, "train");
  if (o.eval_every > 0) loader(1, 1, "valid");
}

// The trainer's refusal line (its ranks print "[rank R] error: …"), or nullopt when the plan fits or the front
// cannot be sure.
std::optional<std::string> refusal(const ut::TrainOptions& o, const ulysses::Environment& vars, int rank) {
  if (o.ignore_memory_plan) return std::nullopt;   // the trainer warns instead
  try {
    const std::optional<PlanInputs> in = plan_inputs(o, vars);
    if (!in) return std::nullopt;
    try {
      ulysses::plan::MemoryFlags flags = o.memory;
      ulysses::plan::settle_precision(flags, /*gpu=*/false);   // plan_inputs plans CPU runs only
      ulysses::plan::check_memory_fits(in->config, flags, in->layout(), {false, "cpu", 0}, o.memory_profile,
                                       in->data.seq_len);
      return std::nullopt;
    } catch (const ulysses::BadInput& e) {
      check_as_the_trainer_would(o, *in, rank);
      return ulysses::one_line(e);
    }
  } catch (const std::exception&) {   // the trainer's to say, with its ranks agreeing
    return std::nullopt;
  }
}

// One line for the job: rank 0 says it, the others give it a moment to be read first.
int end_with(int code, int rank, const std::string& line) {
  if (rank == 0) {
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  } else {
    std::this_thread::sleep_for(kRankZeroFirst);
  }
  return code;
}

[[noreturn]] void become_core(char** argv, int rank) {
  std::error_code ec;
  const fs::path core = fs::read_symlink("/proc/self/exe", ec).parent_path() / kCore;
  if (!ec) execv(core.c_str(), argv);
  const std::string why = ec ? fmt::format("/proc/self/exe: {}", ec.message()) : std::string(std::strerror(errno));
  std::exit(end_with(ulysses::kExitFailure, rank,
                     fmt::format("[rank {}] error: cannot start {} beside ulysses-train: {} — HINT: ninja builds both "
                                 "and meson install puts both in the bin folder; start the trainer there\n",
                                 rank, kCore, why)));
}

}  // namespace

int main(int argc, char** argv) {
  const ulysses::Environment vars = ulysses::this_environment();
  const int rank = ulysses::launch_rank(vars);
  CLI::App app{ut::kTrainTitle};
  ut::TrainOptions o;
  bool print_config = false;
  ut::set_up(app, o, print_config);
  if (auto code = ulysses::parse_command_line(app, argc, argv, /*speak=*/rank == 0))
    return *code == 0 ? 0 : end_with(*code, rank, "");   // rank 0 has said why
  if (print_config) {
    if (rank == 0) fmt::print("{}", app.config_to_str(true, false));
    return 0;
  }
  if (const std::optional<std::string> why = refusal(o, vars, rank))
    return end_with(ulysses::kExitBadInput, rank, fmt::format("[rank {}] error: {}\n", rank, *why));
  become_core(argv, rank);
}

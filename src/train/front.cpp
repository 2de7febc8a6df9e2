// ulysses-train: what users start (mpiexec, srun --mpi=pmi2, launch/local.sh, the sbatch files). A front without
// LibTorch or MPI: it parses the command line (train/cli.hpp; --help, --print-config and bad flags end here) and,
// where the run's device is certainly this host's CPU and the launcher says that every rank runs on this node
// (core/launch_env.hpp), checks the memory plan exactly as the trainer would (plan/fit_check.hpp). On one node
// every rank computes the same plan from the same memory, so all refuse or none does, and rank 0's line is the one
// line. A run that cannot fit ends here, exit 2, in a few MiB and milliseconds per rank instead of the ~480 MiB and
// seconds LibTorch costs each rank before main: 8 ranks of an 8B config on a 24 GiB node are refused without
// pushing the node into swap.
//
// Everything else (the plan fits, or the front cannot be sure: a GPU, --resume, --calibrate-memory, an unknown
// launcher, ranks on other nodes, an input the trainer checks and names first) becomes ulysses-train-core, found
// beside this binary, by exec with the same argv: the same process, so launchers, signals, PIDs and exit codes see
// no difference.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "arch/model_config.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/launch_env.hpp"
#include "core/rank_layout.hpp"
#include "io/manifest.hpp"
#include "plan/fit_check.hpp"
#include "train/cli.hpp"

namespace fs = std::filesystem;
namespace ut = ulysses::train;

namespace {

constexpr const char* kCore = "ulysses-train-core";

// What --device would pick, when that is certainly the CPU: asked for, or auto on a host without NVIDIA's driver.
bool certainly_cpu(const ut::TrainOptions& o) {
  return o.device == "cpu" || (o.device == "auto" && !fs::exists("/dev/nvidiactl"));
}

struct PlanInputs {
  ulysses::arch::ModelConfig config;
  ulysses::plan::Layout layout;
  std::int64_t seq_len = 0;
};

// What the trainer's refusal reads, read as the trainer reads it; nullopt where the front cannot be sure of it, or
// where a check the trainer makes before the plan fails (the trainer names that).
std::optional<PlanInputs> plan_inputs(const ut::TrainOptions& o, const ulysses::LaunchEnv& env) {
  if (!o.calibrate_memory.empty() || !o.resume.empty() || o.data.empty() || o.output.empty() || o.comm == "nccl" ||
      !certainly_cpu(o) || (o.world > 0 && o.world != env.world) || env.ranks_on_node != env.world)
    return std::nullopt;
  try {
    const ulysses::RankLayout ranks(env.world, static_cast<int>(o.sp));
    const fs::path config_path = ut::model_config_path(o);
    PlanInputs in{ulysses::arch::read_model_config(config_path),
                  {1, env.world, ranks.sp(), o.micro_batch},
                  ulysses::shard::read_manifest(o.data).seq_len};
    ulysses::arch::check_heads_for_sp(in.config, ranks.sp(), config_path.string());
    return in;
  } catch (const ulysses::BadInput&) {
    return std::nullopt;
  }
}

// The trainer's refusal line (its ranks print "[rank R] error: …"), or nullopt when the plan fits.
std::optional<std::string> refusal(const ut::TrainOptions& o, const PlanInputs& in) {
  try {
    ulysses::plan::check_memory_fits(in.config, o.memory, in.layout, {false, "cpu", 0}, o.memory_profile, in.seq_len);
    return std::nullopt;
  } catch (const ulysses::BadInput& e) {
    return ulysses::one_line(e);
  }
}

[[noreturn]] void become_core(char** argv) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path core = (ec ? fs::path(argv[0]) : self).parent_path() / kCore;
  execv(core.c_str(), argv);
  fmt::print(stderr, "error: cannot start {}: {} — HINT: {} belongs beside ulysses-train (ninja builds both, meson "
             "install puts both in the bin folder)\n", core.string(), std::strerror(errno), kCore);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<ulysses::LaunchEnv> env = ulysses::launch_env();
  const int rank = env ? env->rank : 0;
  CLI::App app{ut::kTrainTitle};
  ut::TrainOptions o;
  bool print_config = false;
  ut::set_up(app, o, print_config);
  if (auto code = ulysses::parse_command_line(app, argc, argv, /*speak=*/rank == 0)) return *code;
  if (print_config) {
    if (rank == 0) fmt::print("{}", app.config_to_str(true, false));
    return 0;
  }
  if (const std::optional<PlanInputs> in = env ? plan_inputs(o, *env) : std::nullopt)
    if (const std::optional<std::string> why = refusal(o, *in)) {
      if (rank == 0) fmt::print(stderr, "[rank {}] error: {}\n", rank, *why);
      return ulysses::kExitBadInput;
    }
  become_core(argv);
}

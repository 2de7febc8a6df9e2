// ulysses-train-core: the trainer itself, one process per device (here: per CPU rank). Users start ulysses-train
// (train/front.cpp), which parses the same command line (train/cli.hpp) without LibTorch, refuses a plan that
// certainly cannot fit, and otherwise becomes this program (exec: the same process, argv and launcher variables).
// Started directly it does everything itself; the refusal is checked again here either way (trainer.cpp).
#include <sys/prctl.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "comm/mpi_communicator.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/mpi_world.hpp"
#include "dist/process_groups.hpp"
#include "plan/memory_flags.hpp"
#include "train/calibrate.hpp"
#include "train/cli.hpp"
#include "train/device.hpp"
#include "train/signals.hpp"
#include "train/trainer.hpp"

namespace ut = ulysses::train;

int main(int argc, char** argv) {
  prctl(PR_SET_NAME, "ulysses-train");   // what ps, top and killall show: the name users started
  ulysses::dist::MpiWorld world(argc, argv);
  ulysses::set_log_tag(world.size() > 1 ? "train r" + std::to_string(world.rank()) : "train");
  CLI::App app{ut::kTrainTitle};
  ut::TrainOptions o;
  bool print_config = false;
  ut::set_up(app, o, print_config);
  if (auto code = ulysses::parse_command_line(app, argc, argv, /*speak=*/world.rank() == 0)) return *code;
  ulysses::plan::settle_precision(o.memory, ut::computes_on_gpu(o.device));   // --precision auto
  if (print_config) {
    if (world.rank() == 0) fmt::print("{}", app.config_to_str(true, false));
    return 0;
  }
  // Before anything slow (weights, checkpoint, communicators): a signal during start-up is kept, not fatal.
  // Not for calibration, whose children are ended by SIGTERM.
  if (o.calibrate_memory.empty()) ut::install_stop_signals();
  return ulysses::dist::run_guarded(world, [&] {
    ulysses::dist::check_world_size(world.size(), o.world > 0 ? std::optional<int>(o.world) : std::nullopt);
    ut::check_world_for_sp(o, world.size());
    ulysses::RankLayout layout(world.size(), static_cast<int>(o.sp), static_cast<int>(o.sp_ring));
    ulysses::dist::ProcessGroups groups(layout);
    ulysses::comm::MpiCommunicator world_group(groups.world());   // control messages; the data groups are made per device
    if (!o.calibrate_memory.empty()) return ut::run_calibration(o, world_group);
    return ut::run_training(o, groups, world_group);
  });
}

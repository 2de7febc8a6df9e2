// Checkpointer: when a run saves and when it must stop early — the cadence (--save-every: every N steps, at the end
// and on a stop; -1 never), the job's end (--end-time or SLURM_JOB_END_TIME, --stop-margin) and the save watchdog
// (--save-timeout). Every rank holds one and takes the same decisions at the same points, so the collectives behind
// them (the deadline's vote, the save's writes and barrier) are taken by all ranks or by none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "comm/communicator.hpp"
#include "core/rank_layout.hpp"
#include "dist/watchdog.hpp"
#include "train/checkpoint.hpp"
#include "train/model_states.hpp"
#include "train/options.hpp"

namespace ulysses::train {

class Checkpointer {
 public:
  // end: this rank's view of the job's end (seconds since the epoch; nullopt: none known). Collective: the ranks
  // agree on the earliest; rank 0 says when the run will stop for it.
  // model_config: the text of the checkpoints' config.json (train::RunModelConfig).
  Checkpointer(const TrainOptions& o, const RankLayout& layout, std::string model_config,
               std::string architecture, comm::Communicator& world, int rank, std::optional<double> end);

  bool saves() const { return o_.save_every >= 0; }   // -1: never, not even on a stop
  void loaded(double seconds) { save_seconds_ = seconds; }   // until there is a save, the load's time stands for it
  // Collective: true when the job's end is so near that the next step (next_seconds) and a save would end within
  // --stop-margin of it. False without a known end.
  bool late(double next_seconds);
  // After a step: saves when due (every --save-every steps, the last step, or stop); collective.
  void after_step(ModelStates& states, const TrainerState& state, bool stop);
  std::int64_t saved_step() const { return saved_step_; }   // the step this run last saved (-1: none yet)
  // Rank 0's line when the run stops before its last step (late: the job's end; else a signal).
  void say_stopped(std::int64_t step, bool late) const;

 private:
  void save(ModelStates& states, const TrainerState& state);

  const TrainOptions& o_;
  const RankLayout& layout_;
  std::string model_config_;
  std::string architecture_;
  comm::Communicator& world_;
  int rank_;
  std::optional<double> end_;
  double save_seconds_ = 0;   // the last save's, for the deadline
  std::int64_t saved_step_ = -1;
  // A save that hangs (one rank's file system stuck, its peers waiting for it in MPI) ends the job after
  // --save-timeout with one line, instead of holding every rank until the time limit.
  dist::Watchdog watch_;
};

}  // namespace ulysses::train

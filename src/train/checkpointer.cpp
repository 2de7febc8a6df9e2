#include "train/checkpointer.hpp"

#include <chrono>
#include <limits>

#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/mpi_world.hpp"
#include "train/all_ranks.hpp"
#include "train/signals.hpp"

namespace ulysses::train {
namespace {

constexpr double kNoEnd = std::numeric_limits<double>::infinity();   // no job end known

// One end for all ranks (the earliest), so that they all take the deadline's collective or none does.
std::optional<double> earliest_end(std::optional<double> end, comm::Communicator& world) {
  const double earliest = -max_over_ranks(end ? -*end : -kNoEnd, world);
  return earliest < kNoEnd ? std::optional<double>(earliest) : std::nullopt;
}

}  // namespace

Checkpointer::Checkpointer(const TrainOptions& o, const RankLayout& layout, std::string model_config,
                           std::string architecture, comm::Communicator& world, int rank, std::optional<double> end)
    : o_(o), layout_(layout), model_config_(std::move(model_config)), architecture_(std::move(architecture)),
      world_(world), rank_(rank), end_(earliest_end(end, world)),
      watch_(std::chrono::seconds(o.save_timeout), "--save-timeout", dist::abort_job, std::chrono::seconds(1)) {
  if (end_ && rank_ == 0)
    log_info("the job ends in {:.0f} s: the run {}exits {} once a step and a save would end within {:.0f} s of it "
             "(--stop-margin)", *end_ - now_since_epoch(), saves() ? "saves and " : "",
             static_cast<int>(kExitPreempted), o_.stop_margin);
}

bool Checkpointer::late(double next_seconds) {
  return end_ && any_rank(past_deadline(now_since_epoch(), *end_, next_seconds, save_seconds_, o_.stop_margin), world_);
}

void Checkpointer::after_step(ModelStates& states, const TrainerState& state, bool stop) {
  if (saves() && (stop || state.step == o_.steps || (o_.save_every > 0 && state.step % o_.save_every == 0)))
    save(states, state);
}

void Checkpointer::save(ModelStates& states, const TrainerState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  dist::Watchdog::Call watched =
      watch_.begin(fmt::format("the checkpoint save of step {} (every rank's writes, then a barrier)", state.step));
  std::filesystem::path dir;
  try {
    dir = save_checkpoint(o_.output / "checkpoints", states, state, layout_, model_config_, architecture_, o_.keep_last,
                          world_);
  } catch (const std::exception& e) {   // a full disk, a quota, a folder gone: the run's output is at fault
    throw BadInput(fmt::format("the checkpoint of step {} could not be saved: {}", state.step,
                               printable(e.what(), 512)),
                   fmt::format("free space (or fix permissions) under {}; the checkpoints saved before are intact: "
                               "resume from them with --resume auto", (o_.output / "checkpoints").string()));
  }
  if (rank_ == 0) log_info("saved {}", dir.string());
  saved_step_ = state.step;
  world_.barrier();
  watched.issued([] { return dist::Probe{dist::Probe::State::kDone, ""}; });
  save_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Checkpointer::say_stopped(std::int64_t step, bool late) const {
  if (rank_ != 0) return;
  log_info("{}: {} at step {}, exiting with code {}{}",
           late ? fmt::format("the job ends in {:.0f} s (--stop-margin {:.0f})", *end_ - now_since_epoch(),
                              o_.stop_margin)
                : "stop signal received",
           saves() ? "saved" : "not saved (--save-every -1)", step, static_cast<int>(kExitPreempted),
           saves() ? " (resume with --resume auto)" : "");
}

}  // namespace ulysses::train

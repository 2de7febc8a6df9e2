#include "train/rank_groups.hpp"

namespace ulysses::train {

RankGroups::RankGroups(const dist::ProcessGroups& groups, comm::Backend backend, const c10::Device& device,
                       std::chrono::seconds timeout, plan::Sharding sharding, bool prefetch, bool head_groups)
    : sharding_(sharding) {
  sequence_ = comm::make_communicator(backend, groups.sp(), device, timeout);
  loss_ = comm::make_communicator(backend, groups.world(), device, timeout);
  if (groups.layout().ring() > 1) {
    ulysses_ = comm::make_communicator(backend, groups.ulysses(), device, timeout);
    ring_ = comm::make_communicator(backend, groups.ring(), device, timeout);
  }
  if (sharding == plan::Sharding::kHybrid) replicas_ = comm::make_communicator(backend, groups.dp(), device, timeout);
  if (sharding == plan::Sharding::kHybrid && backend == comm::Backend::kNccl && prefetch)
    gather_ = comm::make_communicator(backend, groups.sp(), device, timeout);
  if (head_groups && prefetch && backend == comm::Backend::kNccl && groups.layout().ulysses() > 1)
    ulysses_ahead_ = comm::make_communicator(backend, groups.ulysses(), device, timeout);
}

comm::Communicator* RankGroups::shard() const {
  switch (sharding_) {
    case plan::Sharding::kFull: return loss_.get();
    case plan::Sharding::kHybrid: return sequence_.get();
    case plan::Sharding::kNone: break;
  }
  return nullptr;
}

model::StatePlacement RankGroups::states_on(const c10::Device& device, const plan::Features& f) const {
  if (!shard()) return {};
  return {.shard_group = shard(), .replica_group = replicas(), .device = device,
          .offload_optimizer = f.offload_optimizer, .offload_params = f.offload_params, .gather_group = gather()};
}

}  // namespace ulysses::train

// RankGroups: a rank's communicators on its device's backend, asked for by purpose. Built once, collectively, from
// the process groups (RankLayout's MPI sub-communicators), the backend and the sharding mode; nothing else makes a
// device communicator for the trainer, and nothing branches on the sharding mode to find one.
//
//   sequence   the SP group
//   ulysses    its Ulysses sub-group: the all-to-alls (the SP group itself without a ring)
//   ulysses_ahead  the all-to-alls head groups issue ahead on a side stream (attention.hpp): a communicator of the
//              Ulysses group of its own where the Ulysses group's own would make the current group's all-to-all wait
//              for them (head groups + prefetch over NCCL, U > 1); otherwise the Ulysses group's
//   ring       its ring sub-group: the K/V blocks of ring attention (null without a ring)
//   loss       every rank: losses, label counts and replicated gradients are summed over SP × DP
//   shard      the ranks that split each unit's states (full_shard: every rank; hybrid_shard: the SP group)
//   replicas   the ranks that hold the same shard (hybrid_shard: the DP group; null otherwise)
//   gather     where the units' all-gathers run: the shard group, or a communicator of its own where the shard group
//              also carries other work on the compute stream (hybrid + prefetch over NCCL: the SP group's all-to-alls
//              would queue behind a prefetched gather)
// A dry run's are MPI communicators, never used for tensors.
#pragma once

#include <chrono>
#include <memory>

#include <c10/core/Device.h>

#include "comm/backend.hpp"
#include "comm/communicator.hpp"
#include "dist/process_groups.hpp"
#include "model/sharded_states.hpp"
#include "plan/memory_flags.hpp"

namespace ulysses::train {

class RankGroups {
 public:
  // sharding: the resolved mode; prefetch: whether gathers are issued ahead (a gather group of its own over NCCL);
  // head_groups: whether attention may run in head groups (--attention-head-groups other than 1: with prefetch over
  // NCCL, a Ulysses group of their own for the all-to-alls issued ahead).
  RankGroups(const dist::ProcessGroups& groups, comm::Backend backend, const c10::Device& device,
             std::chrono::seconds timeout, plan::Sharding sharding, bool prefetch, bool head_groups);

  comm::Communicator& sequence() const { return *sequence_; }
  comm::Communicator& ulysses() const { return ulysses_ ? *ulysses_ : *sequence_; }
  comm::Communicator* ring() const { return ring_.get(); }
  comm::Communicator& ulysses_ahead() const { return ulysses_ahead_ ? *ulysses_ahead_ : ulysses(); }
  comm::Communicator& loss() const { return *loss_; }
  comm::Communicator* shard() const;                                      // null: not sharded
  comm::Communicator* replicas() const { return replicas_.get(); }       // null: no replicas of a shard
  comm::Communicator* gather() const { return gather_ ? gather_.get() : shard(); }
  plan::Sharding sharding() const { return sharding_; }

  // Where a sharded model's states live (an empty placement when not sharded); what is offloaded, from `offload`.
  model::StatePlacement states_on(const c10::Device& device, const plan::Features& offload) const;

 private:
  plan::Sharding sharding_;
  std::unique_ptr<comm::Communicator> sequence_, loss_, replicas_, gather_, ulysses_, ring_, ulysses_ahead_;
};

}  // namespace ulysses::train

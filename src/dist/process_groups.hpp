// ProcessGroups: the MPI communicators of a RankLayout — world, sp, dp and grad; with a ring (RankLayout::ring() > 1)
// also the SP group's Ulysses and ring sub-groups (rank i of ulysses() is layout.ulysses_group_of(rank)[i], of ring()
// layout.ring_group_of(rank)[i]).
//
// Built collectively on MPI_COMM_WORLD (every rank constructs it with the same layout). Colours and
// keys come from RankLayout only, so rank i of sp() is layout.sp_group_of(rank)[i] and rank i of dp()
// is layout.dp_group_of(rank)[i]. grad() is where gradients are summed: SP ranks hold different tokens
// of the same replica, so it spans SP × DP = world. Owns sp() and dp() (freed on destruction, which
// must happen before MpiWorld finalizes); world() and grad() are MPI_COMM_WORLD.
#pragma once

#include <mpi.h>

#include "core/rank_layout.hpp"

namespace ulysses::dist {

class ProcessGroups {
 public:
  explicit ProcessGroups(const RankLayout& layout);   // ULY_CHECKs layout.world() == MPI world size
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  const RankLayout& layout() const { return layout_; }
  int rank() const { return rank_; }   // global rank
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  MPI_Comm sp() const { return sp_; }
  MPI_Comm dp() const { return dp_; }
  MPI_Comm grad() const { return MPI_COMM_WORLD; }
  MPI_Comm ulysses() const { return layout_.ring() > 1 ? ulysses_ : sp_; }   // the SP group itself without a ring
  MPI_Comm ring() const { return ring_; }                                     // MPI_COMM_NULL without a ring

 private:
  RankLayout layout_;
  int rank_ = 0;
  MPI_Comm sp_ = MPI_COMM_NULL, dp_ = MPI_COMM_NULL, ulysses_ = MPI_COMM_NULL, ring_ = MPI_COMM_NULL;
};

}  // namespace ulysses::dist

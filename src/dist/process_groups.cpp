#include "dist/process_groups.hpp"

#include "core/error.hpp"
#include "dist/check_mpi.hpp"

namespace ulysses::dist {
namespace {

// Ranks with the same colour form one communicator, ordered by key; checks the resulting rank.
MPI_Comm split(int colour, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, colour, key, &comm));
  int rank = -1;
  CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ULY_CHECK(rank == key, "MPI_Comm_split gave rank {} for key {}", rank, key);
  return comm;
}

}  // namespace

ProcessGroups::ProcessGroups(const RankLayout& layout) : layout_(layout) {
  int size = 0;
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  ULY_CHECK(size == layout.world(), "rank layout is for {} ranks but the MPI world has {}",
            layout.world(), size);
  sp_ = split(layout.dp_rank(rank_), layout.sp_rank(rank_));   // same dp_rank, ordered by sp_rank
  dp_ = split(layout.sp_rank(rank_), layout.dp_rank(rank_));   // same sp_rank, ordered by dp_rank
  if (layout.ring() == 1) return;
  const int dp_rank = layout.dp_rank(rank_), U = layout.ulysses(), R = layout.ring();
  ulysses_ = split(dp_rank * R + layout.ring_rank(rank_), layout.ulysses_rank(rank_));   // same ring block
  ring_ = split(dp_rank * U + layout.ulysses_rank(rank_), layout.ring_rank(rank_));      // same Ulysses rank
}

ProcessGroups::~ProcessGroups() {
  if (ring_ != MPI_COMM_NULL) MPI_Comm_free(&ring_);
  if (ulysses_ != MPI_COMM_NULL) MPI_Comm_free(&ulysses_);
  MPI_Comm_free(&dp_);
  MPI_Comm_free(&sp_);
}

}  // namespace ulysses::dist

// A tiny tool main for the failure-path tests (run through expect_exit.sh):
//   guard_probe world      check_world_size against SLURM_NTASKS (mismatch: exit 2, message)
//   guard_probe fail RANK  every rank passes a barrier; RANK then throws while the others wait in
//                          an all-reduce: run_guarded must end them all (MPI_Abort), not hang
#include <stdexcept>
#include <string>

#include <mpi.h>

#include "core/error.hpp"
#include "dist/check_mpi.hpp"
#include "dist/mpi_world.hpp"

namespace {

int fail_on(int failing_rank, int rank) {
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == failing_rank) throw std::runtime_error("probe failure on rank " + std::to_string(rank));
  int value = rank;
  CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  return ulysses::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  ulysses::dist::MpiWorld world(argc, argv);
  return ulysses::dist::run_guarded(world, [&]() -> int {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "world") {
      ulysses::dist::check_world_size(world.size());
      return ulysses::kExitOk;
    }
    if (mode == "fail" && argc > 2) return fail_on(std::stoi(argv[2]), world.rank());
    throw ulysses::BadInput("usage: guard_probe world | guard_probe fail RANK");
  });
}

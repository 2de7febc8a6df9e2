// Where this process sits in its job, from its launcher's environment alone: before MPI is initialised, or
// without it (ulysses-train's front, train/front.cpp, which refuses a plan that cannot fit before loading
// LibTorch). A launcher is believed only when it names all three numbers:
//   MPICH's Hydra (mpiexec)   PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS
//   Open MPI (mpirun)         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE
//   a Slurm step (srun)       SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE ("8(x4)", "4,4":
//                             the same count on every node, else unknown)
// None of these and no PMI_FD, PMIX_RANK or SLURM_STEP_ID either: a process of its own, world 1. Anything else
// (a launcher named in part, numbers that disagree) is unknown: the caller asks MPI instead.
#pragma once

#include <functional>
#include <optional>

namespace ulysses {

struct LaunchEnv {
  int rank = 0, world = 1;
  int ranks_on_node = 1;   // this rank's node's
};

using EnvLookup = std::function<const char*(const char*)>;   // getenv, or a table in tests

std::optional<LaunchEnv> launch_env(const EnvLookup& get);
std::optional<LaunchEnv> launch_env();   // this process's environment

}  // namespace ulysses

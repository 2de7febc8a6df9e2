// Where this process sits in its job, from its launcher's environment alone: before MPI is initialised, or
// without it (ulysses-train's front, train/front.cpp, which refuses a plan that cannot fit before loading
// LibTorch). A launcher is believed only when it names all three numbers:
//   MPICH's Hydra (mpiexec)   PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS
//   Open MPI (mpirun)         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE
//   a Slurm step with PMI     SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE ("8(x4)", "4,4": the
//   (srun --mpi=pmi2/pmix)    same count on every node, else unknown), and PMI_FD, PMI_RANK or PMIX_RANK (without
//                             them each task would be an MPI singleton of its own)
// No launcher variable at all (kLauncherPrefixes; Slurm's job variables aside, which a batch script has too, but
// not SLURM_STEP_ID): a process of its own, world 1. Anything else (a launcher not listed, one named in part,
// numbers that disagree) is unknown: the caller asks MPI instead.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace ulysses {

// The prefixes of the variables MPI launchers set for their processes (Hydra, Open MPI, Slurm, PMI/PMIx,
// MVAPICH, PALS, Flux): what a child that must be a singleton of its own drops (train/calibrate.cpp).
inline constexpr const char* kLauncherPrefixes[] = {"PMI_",  "PMIX_",   "HYDRA_", "MPIR_", "MPI_LOCAL", "OMPI_",
                                                    "SLURM_", "MV2_", "MPIRUN_", "PALS_", "FLUX_"};

struct LaunchEnv {
  int rank = 0, world = 1;
  int ranks_on_node = 1;   // this rank's node's
};

using Environment = std::map<std::string, std::string>;   // name → value
Environment this_environment();

std::optional<LaunchEnv> launch_env(const Environment& vars);

// This process's rank as any launcher says it (PMI_RANK, PMIX_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID), else 0:
// who speaks for the job when one line is enough, also where launch_env is unknown.
int launch_rank(const Environment& vars);

}  // namespace ulysses

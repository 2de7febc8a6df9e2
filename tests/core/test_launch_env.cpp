// launch_env against tables of variables as Hydra, Open MPI and srun set them, launchers named in part, numbers
// that disagree, and no launcher at all.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/launch_env.hpp"

using ulysses::LaunchEnv;

namespace {

std::optional<LaunchEnv> from(const ulysses::Environment& vars) { return ulysses::launch_env(vars); }

void expect(const std::optional<LaunchEnv>& e, int rank, int world, int on_node) {
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->rank, rank);
  EXPECT_EQ(e->world, world);
  EXPECT_EQ(e->ranks_on_node, on_node);
}

TEST(LaunchEnv, HydraOpenMpiAndSrunAreRead) {
  expect(from({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"MPI_LOCALNRANKS", "8"}, {"PMI_FD", "6"}}), 5, 8, 8);
  expect(from({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}),
         3, 16, 8);
  expect(from({{"SLURM_PROCID", "31"}, {"SLURM_STEP_NUM_TASKS", "32"}, {"SLURM_STEP_TASKS_PER_NODE", "8(x4)"},
               {"SLURM_STEP_ID", "0"}, {"PMI_RANK", "31"}, {"PMI_SIZE", "32"}}),
         31, 32, 8);
  expect(from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_STEP_TASKS_PER_NODE", "4,4"},
               {"PMIX_RANK", "0"}}),
         0, 8, 4);
}

TEST(LaunchEnv, HydraInsideASlurmStepIsHydras) {   // mpiexec's ranks inherit the step's variables
  expect(from({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALNRANKS", "2"}, {"SLURM_PROCID", "0"},
               {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "1"}}),
         1, 2, 2);
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  expect(from({}), 0, 1, 1);
  expect(from({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "32"}}), 0, 1, 1);   // a batch script, not a step
}

TEST(LaunchEnv, WhatCannotBeTrustedIsUnknown) {
  EXPECT_FALSE(from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_STEP_TASKS_PER_NODE", "4,3"},
                     {"PMI_FD", "5"}}));
  EXPECT_FALSE(from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                     {"PMI_FD", "5"}}));
  EXPECT_FALSE(from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"PMI_FD", "5"}}));
  // srun --mpi=none: each task an MPI singleton, whatever the step's numbers say
  EXPECT_FALSE(from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_STEP_TASKS_PER_NODE", "8"},
                     {"SLURM_STEP_ID", "0"}}));
  EXPECT_FALSE(from({{"MV2_COMM_WORLD_RANK", "0"}, {"MV2_COMM_WORLD_SIZE", "8"}}));   // launchers not listed
  EXPECT_FALSE(from({{"PALS_RANKID", "0"}}));
  EXPECT_FALSE(from({{"FLUX_TASK_RANK", "0"}}));
  EXPECT_FALSE(from({{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}}));   // srun --mpi=pmi2 outside a step's variables
  EXPECT_FALSE(from({{"PMIX_RANK", "0"}}));
  EXPECT_FALSE(from({{"SLURM_STEP_ID", "0"}}));
  EXPECT_FALSE(from({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}, {"MPI_LOCALNRANKS", "4"}}));    // rank past the world
  EXPECT_FALSE(from({{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}, {"MPI_LOCALNRANKS", "8"}}));    // more on a node than all
  EXPECT_FALSE(from({{"PMI_RANK", "x"}, {"PMI_SIZE", "4"}, {"MPI_LOCALNRANKS", "4"}}));
  EXPECT_FALSE(
      from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "-2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}));
}

TEST(LaunchEnv, TheRankIsAnyLaunchersOrZero) {
  EXPECT_EQ(ulysses::launch_rank({}), 0);
  EXPECT_EQ(ulysses::launch_rank({{"PMI_RANK", "3"}}), 3);
  EXPECT_EQ(ulysses::launch_rank({{"PMIX_RANK", "4"}}), 4);
  EXPECT_EQ(ulysses::launch_rank({{"OMPI_COMM_WORLD_RANK", "5"}}), 5);
  EXPECT_EQ(ulysses::launch_rank({{"SLURM_PROCID", "6"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}}), 6);
  EXPECT_EQ(ulysses::launch_rank({{"PMI_RANK", "x"}, {"SLURM_PROCID", "2"}}), 2);
}

}  // namespace

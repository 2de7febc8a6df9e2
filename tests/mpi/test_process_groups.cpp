// ProcessGroups against RankLayout: each rank gathers the global ranks of its sp and dp communicators
// and compares them with the layout's groups, for every sp that divides the world (1, 2, 4 at -n 4).
// Also check_world_size's messages (SLURM_NTASKS and an explicit expectation).
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "dist/check_mpi.hpp"
#include "dist/mpi_world.hpp"
#include "dist/process_groups.hpp"

using ulysses::BadInput;
using ulysses::RankLayout;
using ulysses::dist::ProcessGroups;

namespace {

int comm_size(MPI_Comm comm) {
  int size = 0;
  CHECK_MPI(MPI_Comm_size(comm, &size));
  return size;
}

int world_size() { return comm_size(MPI_COMM_WORLD); }

// The global ranks of comm's members, in comm's rank order.
std::vector<int> members(MPI_Comm comm, int global_rank) {
  std::vector<int> ranks(static_cast<std::size_t>(comm_size(comm)));
  CHECK_MPI(MPI_Allgather(&global_rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm));
  return ranks;
}

// Sets (value) or unsets (nullptr) an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(name, value);
  }
  ~ScopedEnv() { set(name_, old_ ? old_->c_str() : nullptr); }

 private:
  static void set(const char* name, const char* value) {
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  const char* name_;
  std::optional<std::string> old_;
};

std::string bad_input_text(int mpi_size, std::optional<int> expected) {
  try {
    ulysses::dist::check_world_size(mpi_size, expected);
  } catch (const BadInput& e) {
    return ulysses::one_line(e);
  }
  return "";
}

}  // namespace

TEST(ProcessGroups, MembersEqualRankLayoutForEverySp) {
  const int world = world_size();
  for (int sp : {1, 2, 4}) {
    if (world % sp != 0) continue;
    RankLayout layout(world, sp);
    ProcessGroups groups(layout);
    const int g = groups.rank();
    EXPECT_EQ(members(groups.sp(), g), layout.sp_group_of(g)) << "sp=" << sp << " rank " << g;
    EXPECT_EQ(members(groups.dp(), g), layout.dp_group_of(g)) << "sp=" << sp << " rank " << g;
    std::vector<int> everyone(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) everyone[static_cast<std::size_t>(r)] = r;
    EXPECT_EQ(members(groups.world(), g), everyone);
    EXPECT_EQ(members(groups.grad(), g), everyone) << "gradients are summed over SP x DP";
  }
}

TEST(ProcessGroups, LayoutForAnotherWorldSizeIsRefused) {
  const int world = world_size();
  EXPECT_THROW(ProcessGroups(RankLayout(2 * world, 1)), std::logic_error);
}

TEST(CheckWorldSize, SlurmNtasksMismatchNamesBothNumbersAndTheFix) {
  ScopedEnv ntasks("SLURM_NTASKS", "4");
  EXPECT_EQ(bad_input_text(1, std::nullopt),
            "MPI world has 1 rank but Slurm asked for 4 tasks (SLURM_NTASKS=4) — HINT: launch with "
            "srun --mpi=pmi2 (srun --mpi=none starts N independent singletons)");
  EXPECT_EQ(bad_input_text(4, std::nullopt), "");
}

TEST(CheckWorldSize, SlurmNtasksMustBeACount) {
  ScopedEnv ntasks("SLURM_NTASKS", "four");
  EXPECT_EQ(bad_input_text(4, std::nullopt), "SLURM_NTASKS='four' is not a positive task count — HINT: launch with "
                                            "srun inside a Slurm job, or unset SLURM_NTASKS outside one");
}

TEST(CheckWorldSize, NoExpectationAcceptsAnySize) {
  ScopedEnv ntasks("SLURM_NTASKS", nullptr);
  EXPECT_EQ(bad_input_text(3, std::nullopt), "");
}

TEST(CheckWorldSize, ExplicitExpectationTakesPrecedenceOverSlurm) {
  ScopedEnv ntasks("SLURM_NTASKS", "3");
  EXPECT_EQ(bad_input_text(2, 8),
            "MPI world has 2 ranks but --world asks for 8 — HINT: launch 8 ranks (mpiexec -n 8 or "
            "srun --mpi=pmi2 -n 8)");
  EXPECT_EQ(bad_input_text(8, 8), "");
}

// The thread level a run needs, and the one MpiWorld asks for: MPICH grants MPI_THREAD_MULTIPLE, so every run
// of this suite can use the NCCL watchdog's abort path from its thread.
TEST(ThreadLevel, WhatEachRunNeedsAndWhatIsGranted) {
  using ulysses::dist::required_thread_level;
  EXPECT_EQ(required_thread_level(/*cuda_tensors=*/false, /*nccl_watchdog=*/false), MPI_THREAD_FUNNELED);
  EXPECT_EQ(required_thread_level(true, false), MPI_THREAD_SERIALIZED);   // --device cuda --comm mpi
  EXPECT_EQ(required_thread_level(true, true), MPI_THREAD_MULTIPLE);      // --comm nccl
  int granted = MPI_THREAD_SINGLE;
  MPI_Query_thread(&granted);
  EXPECT_EQ(granted, MPI_THREAD_MULTIPLE);
  EXPECT_NO_THROW(ulysses::dist::check_thread_level(granted, MPI_THREAD_MULTIPLE, "--comm nccl"));
  try {
    ulysses::dist::check_thread_level(MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, "--device cuda --comm mpi");
    ADD_FAILURE() << "FUNNELED accepted for a run that needs SERIALIZED";
  } catch (const BadInput& e) {
    EXPECT_EQ(ulysses::one_line(e), "this MPI grants MPI_THREAD_FUNNELED but --device cuda --comm mpi needs "
                                    "MPI_THREAD_SERIALIZED — HINT: use an MPI built with thread support (MPICH and "
                                    "Open MPI grant MPI_THREAD_MULTIPLE), or train with --device cpu");
  }
}

// GoogleTest main for tests run under mpiexec: every rank runs every test in the same order.
//
// Rank 0 prints gtest's usual report; other ranks print only their failed assertions, prefixed with
// "[rank r]". The exit code is the worst of all ranks, so a failure on any rank fails the test.
// Tests must keep their collectives unconditional (check after communicating), so that a failure on
// one rank cannot leave the others waiting; meson's timeout catches what slips through.
#include <cstdio>

#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include "dist/check_mpi.hpp"
#include "dist/mpi_world.hpp"

namespace {

class FailuresOnly : public testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    fmt::print(stderr, "[rank {}] {}:{}: Failure\n{}\n", rank_, r.file_name() ? r.file_name() : "?",
               r.line_number(), r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ulysses::dist::MpiWorld world(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  if (world.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly(world.rank()));
  }
  int failed = RUN_ALL_TESTS();
  CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return failed;
}

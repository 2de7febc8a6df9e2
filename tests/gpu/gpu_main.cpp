// main() of the GPU tests: MPI initialised as a singleton (the NCCL test needs MPI_COMM_SELF), and exit 77
// — Meson's "skipped" — with the reason when this machine has no usable CUDA GPU, so CI (no GPU) shows
// these tests as skipped rather than passed.
#include <cstdio>

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "dist/mpi_world.hpp"

int main(int argc, char** argv) {
  ulysses::dist::MpiWorld world(argc, argv);
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA GPU visible to LibTorch (torch::cuda::is_available() is false); "
                "these tests need an NVIDIA GPU and the CUDA build\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// Which Communicator a process group gets: the backend named by `ulysses-train --comm`, on the rank's device.
//
//   mpi   MPI for CPU tensors; for CUDA tensors MPI through host staging (debugging, GPU sharing in tests)
//   nccl  NCCL for CUDA tensors (the CUDA build only)
//   auto  nccl on a CUDA device, mpi on the CPU
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "comm/communicator.hpp"

namespace ulysses::comm {

enum class Backend { kMpi, kNccl };

// Resolves a --comm name against the device; BadInput for an unknown name, nccl on a CPU device, or nccl
// in a build without CUDA.
Backend choose_backend(const std::string& name, const c10::Device& device);
std::string backend_name(Backend b);
bool nccl_built();   // this build has the NCCL backend

// The NCCL loaded at run time against the one built with (nccl_version.hpp check_nccl_runtime): BadInput when
// older, a line for the log when newer, "" when equal or in a build without NCCL.
std::string check_nccl_at_run_time();

// One communicator over the MPI sub-communicator `group` (which must outlive it for the MPI backend).
// timeout: the NCCL watchdog's limit per collective (0: none; MPI collectives are not watched).
std::unique_ptr<Communicator> make_communicator(Backend b, MPI_Comm group, const c10::Device& device,
                                                std::chrono::seconds timeout);

}  // namespace ulysses::comm

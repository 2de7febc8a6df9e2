#include "comm/backend.hpp"

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "comm/nccl_version.hpp"
#if ULYSSES_CUDA
#include <nccl.h>

#include "comm/nccl_communicator.hpp"
#endif

namespace ulysses::comm {

bool nccl_built() { return ULYSSES_CUDA != 0; }

std::string check_nccl_at_run_time() {
#if ULYSSES_CUDA
  int runtime = 0;
  if (ncclGetVersion(&runtime) != ncclSuccess) throw std::runtime_error("ncclGetVersion failed");
  return check_nccl_runtime(NCCL_VERSION_CODE, runtime);
#else
  return "";
#endif
}

Backend choose_backend(const std::string& name, const c10::Device& device) {
  if (name == "auto") return device.is_cuda() && nccl_built() ? Backend::kNccl : Backend::kMpi;
  if (name == "mpi") return Backend::kMpi;
  if (name != "nccl")
    throw BadInput(fmt::format("--comm {}: unknown backend", name), "use auto, nccl or mpi");
  if (!device.is_cuda())
    throw BadInput(fmt::format("--comm nccl needs a CUDA device, this rank trains on {}", device.str()),
                   "pass --device cuda, or --comm mpi on the CPU");
  if (!nccl_built())
    throw BadInput("--comm nccl: this ulysses-train was built without CUDA/NCCL",
                   "rebuild with -Dcuda=enabled against a CUDA LibTorch (docs/training.md), or use --comm mpi");
  return Backend::kNccl;
}

std::string backend_name(Backend b) { return b == Backend::kNccl ? "nccl" : "mpi"; }

std::unique_ptr<Communicator> make_communicator(Backend b, MPI_Comm group, const c10::Device& device,
                                                [[maybe_unused]] std::chrono::seconds timeout) {
#if ULYSSES_CUDA
  if (b == Backend::kNccl) return std::make_unique<NcclCommunicator>(group, device.index(), timeout);
#endif
  ULY_CHECK(b == Backend::kMpi, "backend {} is not built in (device {})", backend_name(b), device.str());
  return std::make_unique<MpiCommunicator>(group);
}

}  // namespace ulysses::comm

#include "core/gpu_fabric.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

namespace ulysses {
namespace {

// The NVML ABI this file uses (nvml.h, API version 12, drivers R530+): return codes are ints, 0 success.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned char kFabricStateCompleted = 3;   // NVML_GPU_FABRIC_STATE_COMPLETED
struct NvmlFabricInfo {                              // nvmlGpuFabricInfo_t
  unsigned char cluster_uuid[16];
  NvmlReturn status;                                 // the registration's own outcome
  unsigned int clique_id;
  unsigned char state;
};
using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using HandleFn = NvmlReturn (*)(const char*, NvmlDevice*);
using FabricFn = NvmlReturn (*)(NvmlDevice, NvmlFabricInfo*);

// NVML's library, opened once per call and closed after it (this runs once per rank, at start-up).
class Nvml {
 public:
  Nvml() : lib_(dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (lib_ == nullptr) return;
    init_ = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<ShutdownFn>(dlsym(lib_, "nvmlShutdown"));
    handle_ = reinterpret_cast<HandleFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    fabric_ = reinterpret_cast<FabricFn>(dlsym(lib_, "nvmlDeviceGetGpuFabricInfo"));
    ready_ = init_ && shutdown_ && handle_ && fabric_ && init_() == kNvmlSuccess;
  }
  ~Nvml() {
    if (ready_) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string fabric_id(const std::string& bus_id) const {
    NvmlDevice device = nullptr;
    NvmlFabricInfo info{};
    if (!ready_ || handle_(bus_id.c_str(), &device) != kNvmlSuccess || fabric_(device, &info) != kNvmlSuccess ||
        info.state != kFabricStateCompleted || info.status != kNvmlSuccess)
      return "";
    // HGX H100/H200 (NVSwitch inside the node only) can report a completed registration with an all-zero cluster
    // UUID: no multi-node NVLink domain (UCX, FlashInfer and torchcomms check the same).
    if (std::all_of(std::begin(info.cluster_uuid), std::end(info.cluster_uuid), [](unsigned char b) { return b == 0; }))
      return "";
    std::string uuid;
    for (const unsigned char b : info.cluster_uuid) uuid += fmt::format("{:02x}", b);
    return fmt::format("{}/{}", uuid, info.clique_id);
  }

 private:
  void* lib_;
  InitFn init_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  HandleFn handle_ = nullptr;
  FabricFn fabric_ = nullptr;
  bool ready_ = false;
};

}  // namespace

std::string gpu_fabric_id(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) return "";
  return Nvml().fabric_id(pci_bus_id);
}

}  // namespace ulysses

// A stand-in for the driver's libnvidia-ml.so.1, built as that file name for test_gpu_fabric (LD_LIBRARY_PATH):
// the calls core/gpu_fabric.cpp makes, answered from environment variables the test sets before each call.
//   FAKE_NVML_INIT    "fail": nvmlInit_v2 fails (a driver/library mismatch)
//   FAKE_NVML_BUS     the one PCI bus id with a GPU
//   FAKE_NVML_FABRIC  "<call result> <registration status> <clique id> <state> <uuid byte>": what
//                     nvmlDeviceGetGpuFabricInfo returns (3 NOT_SUPPORTED on H100; state 3 = completed)
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

namespace {
struct FabricInfo {   // nvmlGpuFabricInfo_t
  unsigned char cluster_uuid[16];
  int status;
  unsigned int clique_id;
  unsigned char state;
};
int the_device = 0;
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}
}  // namespace

extern "C" {
int nvmlInit_v2() { return env("FAKE_NVML_INIT") == "fail" ? 18 : 0; }
int nvmlShutdown() { return 0; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  if (env("FAKE_NVML_BUS") != bus) return 6;   // NVML_ERROR_NOT_FOUND
  *device = &the_device;
  return 0;
}
int nvmlDeviceGetGpuFabricInfo(void* device, FabricInfo* info) {
  if (device != &the_device) return 2;          // NVML_ERROR_INVALID_ARGUMENT
  std::istringstream in(env("FAKE_NVML_FABRIC"));
  int result = 0, status = 0, byte = 0;
  unsigned int clique = 0, state = 0;
  in >> result >> status >> clique >> state >> byte;
  std::memset(info->cluster_uuid, byte, sizeof info->cluster_uuid);
  info->status = status;
  info->clique_id = clique;
  info->state = static_cast<unsigned char>(state);
  return result;
}
}

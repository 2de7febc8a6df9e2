/* A stand-in for the driver's libnvidia-ml.so.1, built as that file name for test_gpu_fabric (LD_LIBRARY_PATH): the
 * calls core/gpu_fabric.cpp makes, answered from environment variables the test sets before each call. C, as NVML
 * is (UBSan's function-type check then sees what it sees with the real library).
 *   FAKE_NVML_INIT    "fail": nvmlInit_v2 fails (a driver/library mismatch)
 *   FAKE_NVML_BUS     the one PCI bus id with a GPU
 *   FAKE_NVML_FABRIC  "<call result> <registration status> <clique id> <state> <uuid byte>": what
 *                     nvmlDeviceGetGpuFabricInfo returns (3 NOT_SUPPORTED on H100; state 3 = completed) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fabric_info { /* nvmlGpuFabricInfo_t */
  unsigned char cluster_uuid[16];
  int status;
  unsigned int clique_id;
  unsigned char state;
};

static int the_device;

static const char* env(const char* name) {
  const char* v = getenv(name);
  return v != NULL ? v : "";
}

int nvmlInit_v2(void) { return strcmp(env("FAKE_NVML_INIT"), "fail") == 0 ? 18 : 0; }
int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  if (strcmp(env("FAKE_NVML_BUS"), bus) != 0) return 6; /* NVML_ERROR_NOT_FOUND */
  *device = &the_device;
  return 0;
}

int nvmlDeviceGetGpuFabricInfo(void* device, struct fabric_info* info) {
  int result = 0, status = 0, byte = 0;
  unsigned int clique = 0, state = 0;
  if (device != &the_device) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  if (sscanf(env("FAKE_NVML_FABRIC"), "%d %d %u %u %d", &result, &status, &clique, &state, &byte) != 5) return 999;
  memset(info->cluster_uuid, byte, sizeof info->cluster_uuid);
  info->status = status;
  info->clique_id = clique;
  info->state = (unsigned char)state;
  return result;
}

// gpu_fabric_id against a stand-in NVML (fake_nvml.cpp, found through LD_LIBRARY_PATH as libnvidia-ml.so.1):
// the id of a registered GPU, and "" for every way of not knowing it. The test without the stand-in
// (core_gpu_fabric_without_nvml) checks that a machine without the driver's library answers "" too.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/gpu_fabric.hpp"

using ulysses::gpu_fabric_id;

namespace {

constexpr const char* kBus = "0000:18:00.0";

void answer(const char* fabric, const char* init = "ok") {
  setenv("FAKE_NVML_BUS", kBus, 1);
  setenv("FAKE_NVML_FABRIC", fabric, 1);
  setenv("FAKE_NVML_INIT", init, 1);
}

}  // namespace

TEST(GpuFabric, RegisteredGpuGivesClusterUuidAndClique) {
  answer("0 0 7 3 171");   // success, registered, clique 7, completed, uuid bytes 0xab
  EXPECT_EQ(gpu_fabric_id(kBus), "abababababababababababababababab/7");
  answer("0 0 0 3 1");
  EXPECT_EQ(gpu_fabric_id(kBus), "01010101010101010101010101010101/0");
  answer("0 0 0 3 0");   // completed, but an all-zero cluster UUID: HGX H100/H200, no multi-node domain
  EXPECT_EQ(gpu_fabric_id(kBus), "");
}

TEST(GpuFabric, UnknownWhenTheGpuHasNoCompleteFabric) {
  answer("3 0 7 3 171");   // NVML_ERROR_NOT_SUPPORTED: H100 HGX, NVLink ends at the node
  EXPECT_EQ(gpu_fabric_id(kBus), "");
  answer("0 0 7 1 171");   // state 1: not started
  EXPECT_EQ(gpu_fabric_id(kBus), "");
  answer("0 0 7 2 171");   // state 2: in progress
  EXPECT_EQ(gpu_fabric_id(kBus), "");
  answer("0 999 7 3 171"); // completed, but the registration itself failed
  EXPECT_EQ(gpu_fabric_id(kBus), "");
}

TEST(GpuFabric, UnknownWithoutAGpuOrAWorkingNvml) {
  answer("0 0 7 3 171");
  EXPECT_EQ(gpu_fabric_id(""), "");               // the CPU: no bus id
  EXPECT_EQ(gpu_fabric_id("0000:99:00.0"), "");   // no GPU at that bus id
  answer("0 0 7 3 171", "fail");
  EXPECT_EQ(gpu_fabric_id(kBus), "");             // nvmlInit fails
}

// Run without the stand-in: on this project's CI machines there is no libnvidia-ml.so.1 at all (the dlopen fails);
// on a GPU machine the driver's own library has no GPU at this bus id.
TEST(GpuFabricWithoutNvml, UnknownEverywhere) {
  EXPECT_EQ(gpu_fabric_id("0000:fe:1f.7"), "");
}

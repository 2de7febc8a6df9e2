// The trainer's device, backend and precision choices on a machine without a GPU (and with one, where the
// answers differ, both branches are asserted): --device/--comm/--precision errors, the GPU peak table,
// and that bf16 autocast applies inside its scope only.
#include <gtest/gtest.h>
#include <torch/types.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/matmul.h>

#include "comm/backend.hpp"
#include "comm/nccl_version.hpp"
#include "core/error.hpp"
#include "train/device.hpp"
#include "model/precision.hpp"

namespace ulysses::train {
namespace {

template <typename F>
std::string bad_input_of(F f) {
  try {
    f();
  } catch (const BadInput& e) {
    return one_line(e);
  }
  return "no BadInput";
}

bool gpu_visible() { return choose_device("auto", 0).is_cuda(); }

TEST(Device, CpuIsAlwaysThere) {
  EXPECT_TRUE(choose_device("cpu", 3).is_cpu());
  EXPECT_EQ(bad_input_of([] { choose_device("tpu", 0); }), "--device tpu: unknown device — HINT: use auto, cpu or cuda");
}

TEST(Device, CudaWithoutAGpuIsABadInputNamingTheFix) {
  if (gpu_visible()) {
    EXPECT_TRUE(choose_device("cuda", 0).is_cuda());
    return;
  }
  EXPECT_TRUE(choose_device("auto", 0).is_cpu());
  const std::string why = bad_input_of([] { choose_device("cuda", 0); });
  if (cuda_built()) EXPECT_NE(why.find("no GPU is visible to this process"), std::string::npos) << why;
  else EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
}

TEST(Device, KnowsThePeaksOfCommonGpus) {
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3", true), 989.4);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 PCIe", true), 756);
  EXPECT_EQ(known_peak_tflops("NVIDIA H200", true), 989.4);
  EXPECT_EQ(known_peak_tflops("NVIDIA H200 NVL", true), 835);   // before "H200": first match wins
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", true), 312);
  EXPECT_EQ(known_peak_tflops("NVIDIA B200", true), 2250);
  EXPECT_EQ(known_peak_tflops("NVIDIA GB200", true), 2500);
  EXPECT_FALSE(known_peak_tflops("cpu", true).has_value());
  EXPECT_FALSE(peak_gpu_mib(torch::kCPU).has_value());
  // fp32 runs are measured against the FP32 peak, not the bf16 one (LibTorch leaves TF32 off for matmuls)
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3", false), 66.9);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", false), 19.5);
  EXPECT_FALSE(known_peak_tflops("cpu", false).has_value());
}

TEST(Device, TwoRanksOnOneGpuAreRefusedBeforeNccl) {
  EXPECT_NO_THROW(check_one_rank_per_gpu({"a", "a", "b", "b"}, {"0000:18:00.0", "0000:2a:00.0", "0000:18:00.0",
                                                                "0000:2a:00.0"}));   // same bus ids, other hosts
  EXPECT_EQ(bad_input_of([] { check_one_rank_per_gpu({"node 0 (a)", "node 1 (b)"}, {"0000:18:00.0", ""}); }),
            "rank 1 on node 1 (b) has no GPU but the run uses NCCL — HINT: check nvidia-smi and CUDA_VISIBLE_DEVICES "
            "on that node, or pass --device cpu --comm mpi");
  EXPECT_EQ(bad_input_of([] {
              check_one_rank_per_gpu({"a", "a", "a"}, {"0000:18:00.0", "0000:2a:00.0", "0000:18:00.0"});
            }),
            "ranks 0 and 2 both drive GPU 0000:18:00.0 on a: NCCL refuses two ranks on one GPU — HINT: launch one "
            "task per GPU (--ntasks-per-node equal to --gpus-per-node), or pass --comm mpi to share a GPU (slow: "
            "tensors go through host memory)");
  EXPECT_EQ(device_bus_id(torch::kCPU), "");
}

TEST(Backend, ChoosesNcclOnlyForCudaInACudaBuild) {
  EXPECT_EQ(comm::choose_backend("auto", torch::kCPU), comm::Backend::kMpi);
  EXPECT_EQ(comm::choose_backend("mpi", torch::kCPU), comm::Backend::kMpi);
  EXPECT_EQ(comm::choose_backend("auto", c10::Device(torch::kCUDA, 0)),
            comm::nccl_built() ? comm::Backend::kNccl : comm::Backend::kMpi);
  EXPECT_EQ(comm::choose_backend("mpi", c10::Device(torch::kCUDA, 0)), comm::Backend::kMpi);
  EXPECT_NE(bad_input_of([] { comm::choose_backend("nccl", torch::kCPU); }).find("--comm nccl needs a CUDA device"),
            std::string::npos);
  EXPECT_NE(bad_input_of([] { comm::choose_backend("gloo", torch::kCPU); }).find("--comm gloo: unknown backend"),
            std::string::npos);
}

TEST(NcclVersion, CodesAndTheRunTimeCheck) {
  EXPECT_EQ(comm::nccl_version_text(22803), "2.28.3");   // 2.9 on: major·10000 + minor·100 + patch
  EXPECT_EQ(comm::nccl_version_text(2804), "2.8.4");     // before: major·1000 + minor·100 + patch
  EXPECT_EQ(comm::check_nccl_runtime(22803, 22803), "");
  EXPECT_EQ(comm::check_nccl_runtime(22803, 22805), "");   // patch releases differ only in fixes
  EXPECT_EQ(comm::check_nccl_runtime(22803, 22901), "NCCL 2.29.1 at run time (built with 2.28.3)");
  EXPECT_EQ(bad_input_of([] { comm::check_nccl_runtime(22803, 22703); }),
            "NCCL 2.27.3 was loaded at run time but this ulysses-train was built with NCCL 2.28.3 — HINT: an "
            "LD_LIBRARY_PATH or `module load nccl` puts an older libnccl.so.2 first: unset it, load NCCL 2.28.3 or "
            "newer, or rebuild against the NCCL you load");
  EXPECT_NO_THROW(comm::check_nccl_at_run_time());   // this build's own NCCL (the torch wheel's), or none
}

TEST(Precision, NamesAndDtypes) {
  EXPECT_EQ(model::compute_dtype(plan::precision_from_name("fp32")), torch::kFloat);
  EXPECT_EQ(model::compute_dtype(plan::precision_from_name("bf16")), torch::kBFloat16);
  EXPECT_EQ(model::compute_dtype(plan::precision_from_name("amp-bf16")), torch::kBFloat16);
  EXPECT_EQ(model::weight_dtype(plan::precision_from_name("bf16")), torch::kBFloat16);     // norms, biases, table
  EXPECT_EQ(model::weight_dtype(plan::precision_from_name("amp-bf16")), torch::kFloat);    // autocast: fp32 weights
  EXPECT_FALSE(model::autocasts(model::Precision::kBf16));
  EXPECT_EQ(bad_input_of([] { plan::precision_from_name("fp8"); }),
            "--precision fp8: unknown precision — HINT: use fp32, bf16 or amp-bf16");
}

TEST(Precision, Bf16AutocastAppliesInsideItsScopeOnly) {
  const torch::Tensor a = torch::ones({4, 4}), b = torch::ones({4, 4});   // [4, 4] float32
  {
    const model::AutocastScope fp32(model::Precision::kFp32, torch::kCPU);
    EXPECT_EQ(at::matmul(a, b).scalar_type(), torch::kFloat);
  }
  {
    const model::AutocastScope bf16(model::Precision::kBf16, torch::kCPU);   // the bf16 model: no autocast
    EXPECT_EQ(at::matmul(a, b).scalar_type(), torch::kFloat);
  }
  {
    const model::AutocastScope bf16(model::Precision::kAmpBf16, torch::kCPU);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
    EXPECT_EQ(at::matmul(a, b).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  EXPECT_EQ(at::matmul(a, b).scalar_type(), torch::kFloat);
}

}  // namespace
}  // namespace ulysses::train

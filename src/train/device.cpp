#include "train/device.hpp"

#include <array>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

#if ULYSSES_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace ulysses::train {
namespace {

int visible_gpus() {
#if ULYSSES_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

}  // namespace

void use_device([[maybe_unused]] const c10::Device& d) {
#if ULYSSES_CUDA
  if (d.is_cuda()) c10::cuda::set_device(d.index());
#endif
}

bool cuda_built() { return ULYSSES_CUDA != 0; }

bool computes_on_gpu(const std::string& flag) { return flag == "cuda" || (flag == "auto" && visible_gpus() > 0); }

c10::Device choose_device(const std::string& flag, int local_rank) {
  if (flag == "cpu") return c10::Device(c10::kCPU);
  if (flag != "auto" && flag != "cuda") throw BadInput(fmt::format("--device {}: unknown device", flag), "use auto, cpu or cuda");
  const int gpus = visible_gpus();
  if (gpus == 0) {
    if (flag == "auto") return c10::Device(c10::kCPU);
    if (!cuda_built())
      throw BadInput("--device cuda: this ulysses-train was built without CUDA",
                     "rebuild against a CUDA LibTorch with -Dcuda=enabled (docs/training.md), or pass --device cpu");
    throw BadInput("--device cuda: no GPU is visible to this process (CUDA_VISIBLE_DEVICES, driver?)",
                   "check nvidia-smi on this node, or pass --device cpu");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(std::max(local_rank, 0) % gpus));
}

std::string device_name(const c10::Device& d) {
#if ULYSSES_CUDA
  if (d.is_cuda()) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d.index()) == cudaSuccess) return p.name;
  }
#endif
  return d.str();
}

std::string device_line(const c10::Device& d) {
#if ULYSSES_CUDA
  if (d.is_cuda()) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d.index()) == cudaSuccess)
      return fmt::format("{} ({}, {:.1f} GiB, compute capability {}.{})", d.str(), p.name,
                         static_cast<double>(p.totalGlobalMem) / (1u << 30), p.major, p.minor);
  }
#endif
  return d.str();
}

std::int64_t device_memory_bytes(const c10::Device& d) {
#if ULYSSES_CUDA
  cudaDeviceProp p{};
  if (d.is_cuda() && cudaGetDeviceProperties(&p, d.index()) == cudaSuccess)
    return static_cast<std::int64_t>(p.totalGlobalMem);
#endif
  (void)d;
  return 0;
}

std::optional<double> known_peak_tflops(std::string_view gpu_name, bool bf16) {
  struct Peak {
    std::string_view key;
    double bf16, fp32;
  };
  // Vendor datasheets: dense bf16 (half the "with sparsity" figure), FP32 (non-tensor). First match wins.
  static constexpr std::array<Peak, 14> kPeaks{{
      {"GB200", 2500, 80}, {"B200", 2250, 75}, {"B100", 1750, 60},
      {"H200 NVL", 835, 60}, {"H200", 989.4, 66.9}, {"H100 PCIe", 756, 51.2}, {"H100 NVL", 835, 60},
      {"H100", 989.4, 66.9}, {"H800 PCIe", 756, 51.2}, {"H800", 989.4, 66.9}, {"A100", 312, 19.5},
      {"A800", 312, 19.5}, {"L40S", 362.05, 91.6}, {"A10G", 70, 31.2},
  }};
  for (const Peak& p : kPeaks)
    if (gpu_name.find(p.key) != std::string_view::npos) return bf16 ? p.bf16 : p.fp32;
  return std::nullopt;
}

std::string device_bus_id([[maybe_unused]] const c10::Device& d) {
#if ULYSSES_CUDA
  char bus[32] = {};
  if (d.is_cuda() && cudaDeviceGetPCIBusId(bus, sizeof bus, d.index()) == cudaSuccess) return bus;
#endif
  return "";
}

void check_one_rank_per_gpu(const std::vector<std::string>& nodes, const std::vector<std::string>& bus_ids) {
  std::map<std::pair<std::string, std::string>, std::size_t> first;   // (node, GPU) → its first rank
  for (std::size_t r = 0; r < bus_ids.size(); ++r) {
    if (bus_ids[r].empty())
      throw BadInput(fmt::format("rank {} on {} has no GPU but the run uses NCCL", r, nodes[r]),
                     "check nvidia-smi and CUDA_VISIBLE_DEVICES on that node, or pass --device cpu --comm mpi");
    const auto [at, fresh] = first.emplace(std::pair(nodes[r], bus_ids[r]), r);
    if (!fresh)
      throw BadInput(fmt::format("ranks {} and {} both drive GPU {} on {}: NCCL refuses two ranks on one GPU",
                                 at->second, r, bus_ids[r], nodes[r]),
                     "launch one task per GPU (--ntasks-per-node equal to --gpus-per-node), or pass --comm mpi to "
                     "share a GPU (slow: tensors go through host memory)");
  }
}

std::optional<double> peak_gpu_mib([[maybe_unused]] const c10::Device& d) {
#if ULYSSES_CUDA
  if (d.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    return static_cast<double>(stats.allocated_bytes[0].peak) / (1 << 20);   // [0]: all pools
  }
#endif
  return std::nullopt;
}

void reset_peak_gpu_memory([[maybe_unused]] const c10::Device& d) {
#if ULYSSES_CUDA
  if (d.is_cuda()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
  }
#endif
}

void synchronize([[maybe_unused]] const c10::Device& d) {
#if ULYSSES_CUDA
  if (d.is_cuda()) c10::cuda::device_synchronize();
#endif
}

}  // namespace ulysses::train

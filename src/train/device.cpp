#include "train/device.hpp"

#include <array>
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

std::optional<double> known_peak_tflops(std::string_view gpu_name) {
  // Vendor datasheets, dense bf16 (half the "with sparsity" figure). Order matters: first match wins.
  static constexpr std::array<std::pair<std::string_view, double>, 12> kPeaks{{
      {"GB200", 2500}, {"B200", 2250}, {"B100", 1750},
      {"H200", 989.4}, {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989.4}, {"H800", 989.4},
      {"A100", 312}, {"A800", 312}, {"L40S", 362.05}, {"A10G", 70},
  }};
  for (const auto& [key, peak] : kPeaks)
    if (gpu_name.find(key) != std::string_view::npos) return peak;
  return std::nullopt;
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

// Where a rank computes: the device choice (--device), what the device is, its memory high-water mark, and
// the peak TFLOPS that MFU is measured against (--peak-tflops, or a table of known GPUs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/Device.h>

namespace ulysses::train {

// --device auto|cpu|cuda for the rank with this local rank (its index on the node). auto: cuda when this
// build has CUDA and a GPU is visible, else cpu. cuda: GPU local_rank % visible GPUs (several ranks may
// share one). BadInput when cuda is asked for and this build or this machine has none.
c10::Device choose_device(const std::string& flag, int local_rank);

// Whether --device `flag` computes on a GPU (cuda, or auto with one visible): --precision auto's bf16.
bool computes_on_gpu(const std::string& flag);
void use_device(const c10::Device& d);   // makes a CUDA device this thread's current one (no-op on the CPU)
bool cuda_built();                         // this build links CUDA LibTorch
std::string device_name(const c10::Device& d);   // "NVIDIA H100 80GB HBM3" or "cpu"
std::string device_line(const c10::Device& d);   // "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)"
std::int64_t device_memory_bytes(const c10::Device& d);   // a GPU's total memory; 0 on the CPU

// The datasheet peak of a GPU by its name, in TFLOPS, for the precision its matmuls run in: dense bf16
// tensor cores (no sparsity) for bf16 runs; plain FP32 for fp32 runs (LibTorch leaves TF32 off for matmuls).
// nullopt when unknown.
std::optional<double> known_peak_tflops(std::string_view gpu_name, bool bf16);

// The PCI bus id of a CUDA device ("0000:18:00.0"), "" on the CPU: it tells GPUs apart whatever
// CUDA_VISIBLE_DEVICES each rank was narrowed to.
std::string device_bus_id(const c10::Device& d);

// For NCCL, which fails late inside its init: BadInput naming the first two ranks of one node with the same GPU
// ("Duplicate GPU detected"), or a rank without a GPU (--device auto found none there) among ranks with one.
// nodes[r] names rank r's node, bus_ids[r] its GPU ("": the CPU).
void check_one_rank_per_gpu(const std::vector<std::string>& nodes, const std::vector<std::string>& bus_ids);

// The high-water mark of bytes allocated on a CUDA device by PyTorch's caching allocator, in MiB (nullopt on
// the CPU: see report.hpp's peak_rss_mib), since the start of the process.
std::optional<double> peak_gpu_mib(const c10::Device& d);
void reset_peak_gpu_memory(const c10::Device& d);   // frees the allocator's cache and restarts its high-water mark

void synchronize(const c10::Device& d);    // waits for the device's work (no-op on the CPU)

}  // namespace ulysses::train

#include "model/host_buffers.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/core/impl/alloc_cpu.h>
#if ULYSSES_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "core/error.hpp"
#include "core/log.hpp"

namespace ulysses::model {

struct HostBuffers::Pool {
  Pool(const c10::Device& device_, bool keep_) : device(device_), page_locked(device_.is_cuda()), keep(keep_) {}
  ~Pool();
  void* allocate(std::int64_t bytes);   // from the system
  void release(void* p);                // to the system
  void returned(void* p, std::int64_t bytes);

  const c10::Device device;             // a GPU's: current for its CUDA calls
  const bool page_locked, keep;
  mutable std::mutex mutex;
  std::unordered_map<std::int64_t, std::vector<void*>> kept;   // by size in bytes
  std::int64_t held = 0;
};

HostBuffers::Pool::~Pool() {
#if ULYSSES_CUDA
  if (page_locked && keep && !kept.empty()) {   // no copy into or out of a kept buffer still in flight
    const c10::cuda::CUDAGuard on(device);
    static_cast<void>(cudaDeviceSynchronize());
  }
#endif
  for (auto& [bytes, buffers] : kept)
    for (void* p : buffers) release(p);
}

void* HostBuffers::Pool::allocate(std::int64_t bytes) {
  if (!page_locked) return c10::alloc_cpu(static_cast<std::size_t>(bytes));   // its "not enough memory" line
#if ULYSSES_CUDA
  const c10::cuda::CUDAGuard on(device);
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, static_cast<std::size_t>(bytes), cudaHostAllocDefault);
  if (e != cudaSuccess) {
    static_cast<void>(cudaGetLastError());   // not sticky: clear it
    throw BadInput(fmt::format("cannot page-lock {} more host memory for offloading (cudaHostAlloc: {}; {} held "
                               "for it already)", human_bytes(static_cast<std::uint64_t>(bytes)),
                               cudaGetErrorString(e), human_bytes(static_cast<std::uint64_t>(held))),
                   "offload fewer layer inputs (--offload-checkpoints N) or give the job more host memory; "
                   "ulysses-plan prints the host bytes per rank and node");
  }
  return p;
#else
  ULY_CHECK(false, "page-locked host memory needs a CUDA build");
#endif
}

void HostBuffers::Pool::release(void* p) {
  if (!page_locked) return c10::free_cpu(p);
#if ULYSSES_CUDA
  const c10::cuda::CUDAGuard on(device);
  static_cast<void>(cudaFreeHost(p));
#endif
}

void HostBuffers::Pool::returned(void* p, std::int64_t bytes) {
  const std::lock_guard lock(mutex);
  if (keep) {
    kept[bytes].push_back(p);
    return;
  }
  release(p);
  held -= bytes;
}

HostBuffers::HostBuffers(const c10::Device& device, bool keep) : pool_(std::make_shared<Pool>(device, keep)) {}

torch::Tensor HostBuffers::take(at::IntArrayRef sizes, c10::ScalarType dtype) {
  const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  std::int64_t bytes = c10::elementSize(dtype);
  for (const std::int64_t n : sizes) bytes *= n;
  if (bytes == 0) return torch::empty(sizes, options);
  void* p = nullptr;
  {
    const std::lock_guard lock(pool_->mutex);
    if (auto it = pool_->kept.find(bytes); it != pool_->kept.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      p = pool_->allocate(bytes);
      pool_->held += bytes;
    }
  }
  return torch::from_blob(p, sizes, [pool = pool_, bytes](void* q) { pool->returned(q, bytes); }, options);
}

void HostBuffers::wait_for_copies() const {
#if ULYSSES_CUDA
  if (!pool_->page_locked) return;
  const c10::cuda::CUDAGuard on(pool_->device);
  static_cast<void>(cudaDeviceSynchronize());
#endif
}

std::int64_t HostBuffers::held_bytes() const {
  const std::lock_guard lock(pool_->mutex);
  return pool_->held;
}

}  // namespace ulysses::model

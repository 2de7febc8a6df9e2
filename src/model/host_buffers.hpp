// HostBuffers: host memory of exactly the bytes asked for, for what a run moves off its device — the layer inputs
// of checkpoint offload (recompute.hpp), the fp32 master and gradient shards of optimizer offload and the weight
// copies of parameter offload (sharded_states.hpp).
//
// Why not torch's pinned memory: its caching host allocator rounds every block up to the next power of two and
// keeps it (ATen/core/CachingHostAllocator.h, PowerOf2Ceil), so a 6.3 GiB layer input holds 8 GiB of page-locked
// memory, and a size just past a power of two nearly twice its bytes: host memory the planner (plan/memory_model)
// does not count, in the runs whose limit is host memory.
//
//   HostBuffers(device, keep)   page-locked (cudaHostAlloc, that GPU current) when device is a GPU, else plain
//                               (LibTorch's CPU allocation); keep: kept for reuse once a tensor is gone, else
//                               given back at once
//   HostBuffers::for_copies(d)  for what each step asks for again in the same sizes (checkpoint offload's layer
//                               inputs, the gradient shards): kept when d is a GPU — page-locking is slow; given
//                               back at once on a CPU (as torch::empty: the CPU runs' memory is what the
//                               planner's cpu profile measured)
//   take(sizes, dtype)          a contiguous tensor in a buffer of exactly its bytes: a kept one of that size, else
//                               a new one (a page-locking failure is one line naming the bytes). When the tensor
//                               and every view of it are gone, the buffer is kept (or given back)
//   held_bytes()                bytes taken from the system and not given back: in use or kept
//   wait_for_copies()           the host waits for the device's work (a GPU's; nothing on a CPU): every copy into or
//                               out of a buffer issued without blocking is done, and the host may write them
//
// Reuse is immediate, not guarded by events, so a caller makes every device copy into or out of a buffer either
// on one stream (checkpoint offload: its copies' side stream), which orders a buffer's next copy after its last,
// or blocking (the optimizer's masters and gradient shards); the host touches a buffer only after a blocking
// copy or wait_for_copies() (the weight copies: read by copies over without blocking, written once a step). Kept buffers go back to the system when the HostBuffers and every tensor from it are gone (on a GPU after a
// device synchronisation: no copy is still in flight).
#pragma once

#include <cstdint>
#include <memory>

#include <c10/core/Device.h>
#include <torch/types.h>

namespace ulysses::model {

class HostBuffers {
 public:
  HostBuffers(const c10::Device& device, bool keep);
  static HostBuffers for_copies(const c10::Device& device) { return {device, device.is_cuda()}; }
  torch::Tensor take(at::IntArrayRef sizes, c10::ScalarType dtype);
  std::int64_t held_bytes() const;
  void wait_for_copies() const;

 private:
  struct Pool;
  std::shared_ptr<Pool> pool_;   // shared with the tensors taken: it lives until the last of them is gone
};

}  // namespace ulysses::model

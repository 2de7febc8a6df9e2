// SideStream: work issued ahead of the compute stream so that it overlaps the compute stream's kernels — the
// next unit's all-gather (sharded_states.hpp), a layer input's copy to or from host memory (recompute.hpp).
// FSDP's forward/backward prefetch and DeepSpeed's overlap_comm, in one small type.
//
// Memory: what fn returns should be made by the caller on the current stream before launch (and only filled by
// fn), so the caching allocator frees and reuses it in the compute stream's order; memory fn allocates on the
// side stream is reused only once the compute stream has caught up with its free, which a host running ahead
// turns into one more buffer per step it is ahead.
//
//   launch(fn, reads)  CUDA: a pool stream waits for the work queued so far on the current (compute) stream;
//                      fn runs with that side stream current (its kernels, NCCL calls and allocations go there);
//                      `reads` (compute-stream tensors fn reads) are marked as used on the side stream, so the
//                      caching allocator does not reuse their memory before the side stream is done with them;
//                      an event is recorded after fn's work. CPU: fn runs at once, in program order.
//   Ahead::take        the current stream waits for that event; each tensor is marked as used on the current
//                      stream (record_stream), so its memory is not handed back to the side stream while the
//                      compute stream still reads it. CPU: returns the tensors. Once per Ahead.
//
// No host synchronisation anywhere. On a CPU device the callers run the very same code minus the stream and
// event calls, so the CPU tests cover the order of what is issued ahead and what is taken.
//
//   unfilled(buffer)   marks a buffer made on the current stream for a later launch's fn to fill (see Memory):
//                      returns it, as it is — or, with a test delay set, filled with NaN first
//   delay_for_tests(cycles)  tests only (tests/gpu): every later launch first spins its side stream for that many
//                      GPU clock cycles, and unfilled() poisons its buffers, so that a compute stream reading what
//                      a launch fills without take()'s wait reads NaN every time — not once in a while, nor a
//                      reused block that happens to hold the same values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/types.h>

namespace ulysses::model {

class Ahead {   // move-only: one issue, taken once
 public:
  Ahead() = default;
  Ahead(Ahead&&) = default;
  Ahead& operator=(Ahead&&) = default;
  Ahead(const Ahead&) = delete;
  Ahead& operator=(const Ahead&) = delete;
  bool pending() const { return pending_; }
  std::vector<torch::Tensor> take();   // the tensors fn returned, usable on the current stream; leaves nothing

 private:
  friend class SideStream;
  std::vector<torch::Tensor> tensors_;
  std::shared_ptr<c10::Event> done_;   // CUDA: recorded on the side stream after fn's work; null on CPU
  bool pending_ = false;
};

class SideStream {
 public:
  explicit SideStream(c10::Device device);
  Ahead launch(const std::function<std::vector<torch::Tensor>()>& fn, const std::vector<torch::Tensor>& reads = {});
  const c10::Device& device() const { return device_; }
  static torch::Tensor unfilled(torch::Tensor buffer);
  static void delay_for_tests(std::int64_t cycles);

 private:
  c10::Device device_;
  std::optional<c10::Stream> stream_;   // CUDA only
};

// One side stream shared by several users (every layer's head groups), made for the device of the first input
// that asks (again if the device changes), so its users need not know their device when they are built.
class SharedSideStream {
 public:
  std::shared_ptr<SideStream> on(const c10::Device& device);

 private:
  std::shared_ptr<SideStream> stream_;
};

}  // namespace ulysses::model

#include "model/side_stream.hpp"

#include <atomic>
#include <limits>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#if ULYSSES_CUDA
#include <ATen/cuda/Sleep.h>
#endif

#include "core/error.hpp"

namespace ulysses::model {
namespace {

c10::Stream current_stream(const c10::Device& d) { return c10::impl::VirtualGuardImpl(d.type()).getStream(d); }

std::atomic<std::int64_t> test_delay_cycles{0};

}  // namespace

SideStream::SideStream(c10::Device device) : device_(device) {
  if (!device_.is_cuda()) return;
  stream_ = c10::impl::VirtualGuardImpl(device_.type()).getStreamFromGlobalPool(device_);
  device_ = stream_->device();   // indexed: tensors are compared with it
}

Ahead SideStream::launch(const std::function<std::vector<torch::Tensor>()>& fn,
                         const std::vector<torch::Tensor>& reads) {
  Ahead ahead;
  ahead.pending_ = true;
  if (!stream_) {
    ahead.tensors_ = fn();
    return ahead;
  }
  c10::Event queued(device_.type());   // everything the compute stream has queued so far, fn's inputs included
  queued.record(current_stream(device_));
  queued.block(*stream_);
  for (const auto& t : reads)
    if (t.defined() && t.device() == device_) t.record_stream(*stream_);
  {
    const c10::StreamGuard on_side(*stream_);
#if ULYSSES_CUDA
    if (const std::int64_t cycles = test_delay_cycles; cycles > 0 && device_.is_cuda()) at::cuda::sleep(cycles);
#endif
    ahead.tensors_ = fn();
  }
  ahead.done_ = std::make_shared<c10::Event>(device_.type());
  ahead.done_->record(*stream_);
  return ahead;
}

torch::Tensor SideStream::unfilled(torch::Tensor buffer) {
  if (test_delay_cycles > 0 && buffer.is_cuda() && buffer.is_floating_point())
    buffer.fill_(std::numeric_limits<double>::quiet_NaN());
  return buffer;
}

void SideStream::delay_for_tests(std::int64_t cycles) { test_delay_cycles = cycles; }

std::shared_ptr<SideStream> SharedSideStream::on(const c10::Device& device) {
  const bool same = stream_ && stream_->device().type() == device.type() &&
                    (!device.has_index() || stream_->device().index() == device.index());
  if (!same) stream_ = std::make_shared<SideStream>(device);
  return stream_;
}

std::vector<torch::Tensor> Ahead::take() {
  ULY_CHECK(pending_, "Ahead::take: nothing issued, or taken already");
  pending_ = false;
  if (done_) {
    const c10::Stream now = current_stream(done_->device());
    done_->block(now);
    for (const auto& t : tensors_)
      if (t.defined() && t.device() == done_->device()) t.record_stream(now);
    done_.reset();
  }
  std::vector<torch::Tensor> out;
  out.swap(tensors_);
  return out;
}

}  // namespace ulysses::model

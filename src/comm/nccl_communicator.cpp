#include "comm/nccl_communicator.hpp"

#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/ops/ones.h>
#include <nccl.h>

#include <cstdio>
#include <optional>
#include <cstdlib>
#include <string_view>
#include <exception>

#include "comm/shape.hpp"
#include "core/error.hpp"
#include "dist/check_mpi.hpp"
#include "dist/watchdog.hpp"

namespace ulysses::comm {
namespace {

[[noreturn]] void nccl_failed(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : "";
  throw std::runtime_error(fmt::format("{}:{}: {} failed: {} ({}){}{}", file, line, call, ncclGetErrorString(r),
                                       static_cast<int>(r), last && *last ? ": " : "", last ? last : ""));
}

#define CHECK_NCCL(comm, call)                                                  \
  do {                                                                          \
    const ncclResult_t r_ = (call);                                             \
    if (r_ != ncclSuccess) nccl_failed(r_, (comm), #call, __FILE__, __LINE__);  \
  } while (0)

ncclDataType_t nccl_type(std::string_view op, torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return ncclFloat32;
    case torch::kDouble: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kHalf: return ncclFloat16;
    case torch::kLong: return ncclInt64;
    case torch::kInt: return ncclInt32;
    case torch::kByte: return ncclUint8;
    default:
      ULY_CHECK(false, "{}: dtype {} is not supported (float32, float64, bfloat16, float16, int64, int32, uint8)", op,
                c10::toString(t));
  }
  return ncclFloat32;
}

bool is_narrow(torch::ScalarType t) { return t == torch::kBFloat16 || t == torch::kHalf; }

bool forced_send_recv() {
  const char* v = std::getenv("ULYSSES_NCCL_SEND_RECV");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  std::unique_ptr<dist::Watchdog> watchdog;
  // The all-to-all as grouped send/recv even where ncclAlltoAll exists: ULYSSES_NCCL_SEND_RECV=1, so the
  // path older NCCL takes runs (and is tested) on a current one.
  bool send_recv = forced_send_recv();
  // The stream start_send_recv issues on: one per communicator, so that its exchanges run one after another in the
  // order begun while the compute stream goes on (the ring's communicator carries nothing else; an operation issued
  // on the compute stream meanwhile would be ordered by NCCL alone).
  std::optional<c10::cuda::CUDAStream> side;
};

NcclCommunicator::NcclCommunicator(MPI_Comm group, int device, std::chrono::seconds timeout)
    : state_(std::make_unique<State>()), device_(device) {
  CHECK_MPI(MPI_Comm_size(group, &size_));
  CHECK_MPI(MPI_Comm_rank(group, &rank_));
  state_->watchdog = std::make_unique<dist::Watchdog>(std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
                                                      "--comm-timeout", dist::abort_job);
  ncclUniqueId id{};
  if (rank_ == 0) CHECK_NCCL(nullptr, ncclGetUniqueId(&id));
  CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group));
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  dist::Watchdog::Call init =
      state_->watchdog->begin(fmt::format("NCCL communicator init on a group of {} (rank {})", size_, rank_));
  CHECK_NCCL(nullptr, ncclCommInitRank(&state_->comm, size_, id, rank_));
  init.issued([] { return dist::Probe{dist::Probe::State::kDone, ""}; });
  // The group agrees on the all-to-all's path (rank 0's ULYSSES_NCCL_SEND_RECV): a mix would deadlock.
  int send_recv = state_->send_recv ? 1 : 0;
  CHECK_MPI(MPI_Bcast(&send_recv, 1, MPI_INT, 0, group));
  state_->send_recv = send_recv != 0;
}

NcclCommunicator::~NcclCommunicator() {
  state_->watchdog.reset();   // stop watching before the communicator goes
  // While an error unwinds, NCCL is not touched: destroy flushes work that waits on peers blocked in a
  // collective, and abort hangs when only some ranks of a node abort (NVIDIA/nccl#863). The communicator is
  // left to the process, which ends within moments: run_guarded's abort_all with several ranks, its return
  // with one. Its watchdog is stopped first (its thread only polls events, so the join is quick): left
  // running it could judge the abandoned collective a second fatal, or call exit beside the main thread's.
  if (std::uncaught_exceptions() > 0) {
    static_cast<void>(state_.release());
    return;
  }
  if (state_->comm != nullptr) ncclCommDestroy(state_->comm);
}

// Registered before the NCCL call, so a call that blocks inside NCCL (a missing peer) is timed too.
dist::Watchdog::Call NcclCommunicator::begin(const std::string& op, const torch::Tensor& x) {
  return state_->watchdog->begin(fmt::format("NCCL {} of {} {} ({:.1f} MiB) on a group of {} (rank {})", op,
                                             c10::toString(x.scalar_type()), shape_of(x),
                                             static_cast<double>(x.nbytes()) / (1 << 20), size_, rank_));
}

// Records an event after the collective just enqueued; the watchdog ends the job if it errs or hangs. The probe runs
// on the watchdog's thread, whose current device would be GPU 0: without the guard, querying the event there makes a
// CUDA context on GPU 0 (~0.5 GiB) for every rank of a node whose ranks all see every GPU.
void NcclCommunicator::issued(dist::Watchdog::Call& call) {
  const auto device = static_cast<c10::DeviceIndex>(device_);
  auto done = std::make_shared<c10::cuda::CUDAEvent>();
  done->record(c10::cuda::getCurrentCUDAStream(device));
  ncclComm_t comm = state_->comm;
  call.issued([done, comm, device]() -> dist::Probe {
    try {
      const c10::cuda::CUDAGuard on(device);   // throws where the GPU has a sticky error: reported as the query's
      if (done->query()) return {dist::Probe::State::kDone, ""};
    } catch (const std::exception& e) {
      return {dist::Probe::State::kFailed, e.what()};
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
      return {dist::Probe::State::kFailed, fmt::format("{}: {}", ncclGetErrorString(async), ncclGetLastError(comm))};
    return {dist::Probe::State::kPending, ""};
  });
}

namespace {

// What every collective checks first: a contiguous CUDA tensor on this communicator's device.
void check_tensor(std::string_view op, const torch::Tensor& x, int device) {
  ULY_CHECK(x.defined(), "{}: undefined tensor", op);
  ULY_CHECK(x.is_cuda() && x.get_device() == device, "{}: NcclCommunicator takes tensors on cuda:{}, got one on {}",
            op, device, x.device().str());
  ULY_CHECK(x.is_contiguous(), "{}: tensor of shape {} is not contiguous (call .contiguous())", op, shape_of(x));
}

void check_divisible(std::string_view op, const torch::Tensor& x, int size) {
  ULY_CHECK(x.dim() >= 1 && x.size(0) % size == 0, "{}: dim 0 of tensor {} must be divisible by the group size {}",
            op, shape_of(x), size);
}

cudaStream_t stream_of(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

}  // namespace

torch::Tensor NcclCommunicator::all_to_all(const torch::Tensor& x) {   // [P*n, ...]
  check_tensor("all_to_all", x, device_);
  check_divisible("all_to_all", x, size_);
  const auto type = nccl_type("all_to_all", x.scalar_type());
  const auto count = static_cast<std::size_t>(x.numel() / size_);
  torch::Tensor out = torch::empty_like(x);   // [P*n, ...]
  ncclComm_t comm = state_->comm;
  dist::Watchdog::Call call = begin("all_to_all", x);
  bool done = false;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  if (!state_->send_recv) {
    CHECK_NCCL(comm, ncclAlltoAll(x.data_ptr(), out.data_ptr(), count, type, comm, stream_of(device_)));
    done = true;
  }
#endif
  if (!done) {   // NCCL < 2.28, or ULYSSES_NCCL_SEND_RECV=1: one send and one receive per peer, grouped
    const std::size_t bytes = count * static_cast<std::size_t>(x.element_size());
    CHECK_NCCL(comm, ncclGroupStart());
    ncclResult_t r = ncclSuccess;   // the group is ended even when a send or receive fails to enqueue
    for (int peer = 0; peer < size_ && r == ncclSuccess; ++peer) {
      r = ncclSend(static_cast<const char*>(x.data_ptr()) + peer * bytes, count, type, peer, comm, stream_of(device_));
      if (r == ncclSuccess)
        r = ncclRecv(static_cast<char*>(out.data_ptr()) + peer * bytes, count, type, peer, comm, stream_of(device_));
    }
    const ncclResult_t ended = ncclGroupEnd();
    CHECK_NCCL(comm, r);
    CHECK_NCCL(comm, ended);
  }
  issued(call);
  return out;
}

void NcclCommunicator::all_reduce_sum(torch::Tensor& x) {
  check_tensor("all_reduce_sum", x, device_);
  ULY_CHECK(x.scalar_type() != torch::kByte, "all_reduce_sum: uint8 is not summed (it would wrap around)");
  torch::Tensor sum = is_narrow(x.scalar_type()) ? x.to(torch::kFloat) : x;   // x's shape
  dist::Watchdog::Call call = begin("all_reduce_sum", sum);
  CHECK_NCCL(state_->comm, ncclAllReduce(sum.data_ptr(), sum.data_ptr(), static_cast<std::size_t>(sum.numel()),
                                         nccl_type("all_reduce_sum", sum.scalar_type()), ncclSum, state_->comm,
                                         stream_of(device_)));
  issued(call);
  if (!sum.is_same(x)) x.copy_(sum);
}

torch::Tensor NcclCommunicator::all_gather(const torch::Tensor& x) {   // [n, ...]
  ULY_CHECK(x.dim() >= 1, "all_gather: tensor needs a dim 0 to gather along, got shape {}", shape_of(x));
  auto sizes = x.sizes().vec();
  sizes[0] *= size_;
  torch::Tensor out = torch::empty(sizes, x.options());   // [P*n, ...]
  all_gather_into(x, out);
  return out;
}

void NcclCommunicator::all_gather_into(const torch::Tensor& x, torch::Tensor& out) {   // [n, ...] → [P*n, ...]
  check_tensor("all_gather", x, device_);
  check_tensor("all_gather", out, device_);
  ULY_CHECK(x.dim() >= 1 && out.dim() == x.dim() && out.size(0) == x.size(0) * size_ &&
                out.numel() == x.numel() * size_ && out.scalar_type() == x.scalar_type(),
            "all_gather: output {} {} for input {} {} on a group of {}", c10::toString(out.scalar_type()),
            shape_of(out), c10::toString(x.scalar_type()), shape_of(x), size_);
  dist::Watchdog::Call call = begin("all_gather", out);
  CHECK_NCCL(state_->comm, ncclAllGather(x.data_ptr(), out.data_ptr(), static_cast<std::size_t>(x.numel()),
                                         nccl_type("all_gather", x.scalar_type()), state_->comm, stream_of(device_)));
  issued(call);
}

torch::Tensor NcclCommunicator::reduce_scatter_sum(const torch::Tensor& x) {   // [P*n, ...]
  check_tensor("reduce_scatter_sum", x, device_);
  check_divisible("reduce_scatter_sum", x, size_);
  ULY_CHECK(x.scalar_type() != torch::kByte, "reduce_scatter_sum: uint8 is not summed (it would wrap around)");
  const torch::Tensor in = is_narrow(x.scalar_type()) ? x.to(torch::kFloat) : x;   // [P*n, ...]
  torch::Tensor out = torch::empty_like(in.chunk(size_)[0]);                      // [n, ...]
  dist::Watchdog::Call call = begin("reduce_scatter_sum", in);
  CHECK_NCCL(state_->comm, ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(out.numel()),
                                             nccl_type("reduce_scatter_sum", in.scalar_type()), ncclSum, state_->comm,
                                             stream_of(device_)));
  issued(call);
  return out.to(x.scalar_type());
}

void NcclCommunicator::broadcast(torch::Tensor& x, int root) {
  check_tensor("broadcast", x, device_);
  ULY_CHECK(root >= 0 && root < size_, "broadcast: root {} outside a group of {}", root, size_);
  dist::Watchdog::Call call = begin("broadcast", x);
  CHECK_NCCL(state_->comm, ncclBroadcast(x.data_ptr(), x.data_ptr(), static_cast<std::size_t>(x.nbytes()), ncclUint8,
                                         root, state_->comm, stream_of(device_)));
  issued(call);
}

torch::Tensor NcclCommunicator::send_recv(const torch::Tensor& x, int to, int from) {   // [...]
  check_tensor("send_recv", x, device_);
  ULY_CHECK(to >= 0 && to < size_ && from >= 0 && from < size_,
            "send_recv: to {} and from {} must be ranks of a group of {}", to, from, size_);
  torch::Tensor out = torch::empty_like(x);   // [...]
  const auto count = static_cast<std::size_t>(x.nbytes());   // as bytes: every dtype exactly, as broadcast
  ncclComm_t comm = state_->comm;
  dist::Watchdog::Call call = begin(fmt::format("send_recv (to {}, from {})", to, from), x);
  CHECK_NCCL(comm, ncclGroupStart());
  ncclResult_t r = ncclSend(x.data_ptr(), count, ncclUint8, to, comm, stream_of(device_));
  if (r == ncclSuccess) r = ncclRecv(out.data_ptr(), count, ncclUint8, from, comm, stream_of(device_));
  const ncclResult_t ended = ncclGroupEnd();   // the group is ended even when the send or receive fails to enqueue
  CHECK_NCCL(comm, r);
  CHECK_NCCL(comm, ended);
  issued(call);
  return out;
}

namespace {

// A send_recv issued on the communicator's side stream: wait() makes the current stream wait for it.
class SideExchange final : public Communicator::Exchange {
 public:
  SideExchange(torch::Tensor out, c10::cuda::CUDAEvent done, c10::DeviceIndex device)
      : out_(std::move(out)), done_(std::move(done)), device_(device) {}
  torch::Tensor wait() override {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_);
    done_.block(compute);
    out_.record_stream(compute);   // made on the side stream: not handed back to it while the compute stream reads
    return std::move(out_);
  }

 private:
  torch::Tensor out_;
  c10::cuda::CUDAEvent done_;
  c10::DeviceIndex device_;
};

}  // namespace

std::unique_ptr<Communicator::Exchange> NcclCommunicator::start_send_recv(const torch::Tensor& x, int to, int from) {
  check_tensor("start_send_recv", x, device_);
  const auto device = static_cast<c10::DeviceIndex>(device_);
  if (!state_->side) state_->side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device);
  c10::cuda::CUDAEvent ready;   // x as the compute stream has made it so far
  ready.record(compute);
  ready.block(*state_->side);
  x.record_stream(*state_->side);   // read there: its memory not reused before the send is done
  const c10::cuda::CUDAStreamGuard on(*state_->side);
  torch::Tensor out = send_recv(x, to, from);   // [...] enqueued on the side stream, watched there
  c10::cuda::CUDAEvent done;
  done.record(*state_->side);
  return std::make_unique<SideExchange>(std::move(out), std::move(done), device);
}

void NcclCommunicator::barrier() {
  torch::Tensor one = at::ones({1}, at::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device_));   // [1]
  all_reduce_sum(one);
  c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).synchronize();
}

}  // namespace ulysses::comm

#include "comm/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "comm/shape.hpp"
#include "core/error.hpp"
#include "dist/check_mpi.hpp"

namespace ulysses::comm {
namespace {

bool exchangeable(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: case torch::kDouble: case torch::kBFloat16: case torch::kHalf:
    case torch::kLong: case torch::kInt: case torch::kByte:
      return true;
    default:
      return false;
  }
}

void check_tensor(std::string_view op, const torch::Tensor& x) {
  ULY_CHECK(x.defined(), "{}: undefined tensor", op);
  ULY_CHECK(x.is_contiguous(), "{}: tensor of shape {} is not contiguous (call .contiguous())", op,
            shape_of(x));
  ULY_CHECK(exchangeable(x.scalar_type()), "{}: dtype {} is not supported (float32, float64, "
            "bfloat16, float16, int64, int32, uint8)", op, c10::toString(x.scalar_type()));
}

// MPI counts are ints; larger pieces are refused with the sizes rather than silently truncated.
int byte_count(std::string_view op, const torch::Tensor& x, std::int64_t bytes) {
  ULY_CHECK(bytes <= INT_MAX, "{}: {} bytes per rank (tensor {} {}) exceed MPI's int count limit {}",
            op, bytes, c10::toString(x.scalar_type()), shape_of(x), INT_MAX);
  return static_cast<int>(bytes);
}

// Calls piece(begin, count) over [0, total) in pieces of at most INT_MAX: MPI counts are ints, and a
// flat gradient buffer or a broadcast of all weights may hold billions of elements.
template <typename Piece>
void in_int_pieces(std::int64_t total, Piece piece) {
  for (std::int64_t begin = 0; begin < total; begin += INT_MAX)
    piece(begin, static_cast<int>(std::min<std::int64_t>(INT_MAX, total - begin)));
}

// The host copy MPI works on: x itself when it lives on the CPU, else a CPU copy (.cpu() waits for the
// device's current stream, so the data is final).
torch::Tensor on_host(const torch::Tensor& x) { return x.device().is_cpu() ? x : x.cpu(); }

// A result computed on the host, back on the device `like` lives on.
torch::Tensor like_device(const torch::Tensor& host, const torch::Tensor& like) {
  return like.device().is_cpu() ? host : host.to(like.device());
}

MPI_Datatype sum_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kLong: return MPI_INT64_T;
    case torch::kInt: return MPI_INT32_T;
    default: ULY_CHECK(false, "all_reduce_sum: dtype {} is not summed (uint8 would wrap around)",
                       c10::toString(t));
  }
  return MPI_DATATYPE_NULL;
}

void all_reduce_in_place(MPI_Comm comm, torch::Tensor& x) {   // x: float32/float64/int64/int32
  const MPI_Datatype type = sum_type(x.scalar_type());
  auto* data = static_cast<char*>(x.data_ptr());
  const std::int64_t item = x.element_size();
  in_int_pieces(x.numel(), [&](std::int64_t begin, int count) {
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data + begin * item, count, type, MPI_SUM, comm));
  });
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  CHECK_MPI(MPI_Comm_size(comm_, &size_));
  CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
}

torch::Tensor MpiCommunicator::all_to_all(const torch::Tensor& x) {   // [P*n, ...]
  check_tensor("all_to_all", x);
  ULY_CHECK(x.dim() >= 1 && x.size(0) % size_ == 0,
            "all_to_all: dim 0 of tensor {} must be divisible by the group size {}", shape_of(x), size_);
  const int chunk = byte_count("all_to_all", x, static_cast<std::int64_t>(x.nbytes()) / size_);
  const torch::Tensor in = on_host(x);                               // [P*n, ...]
  torch::Tensor out = torch::empty_like(in);                         // [P*n, ...]
  CHECK_MPI(MPI_Alltoall(in.data_ptr(), chunk, MPI_BYTE, out.data_ptr(), chunk, MPI_BYTE, comm_));
  return like_device(out, x);
}

void MpiCommunicator::all_reduce_sum(torch::Tensor& x) {
  check_tensor("all_reduce_sum", x);
  const auto t = x.scalar_type();
  const bool narrow = t == torch::kBFloat16 || t == torch::kHalf;
  if (!narrow && x.device().is_cpu()) return all_reduce_in_place(comm_, x);
  torch::Tensor sum = narrow ? on_host(x).to(torch::kFloat) : x.cpu();   // a host copy of x, [...]
  all_reduce_in_place(comm_, sum);
  x.copy_(sum);
}

torch::Tensor MpiCommunicator::all_gather(const torch::Tensor& x) {   // [n, ...]
  check_tensor("all_gather", x);
  ULY_CHECK(x.dim() >= 1, "all_gather: tensor needs a dim 0 to gather along, got shape {}", shape_of(x));
  const int bytes = byte_count("all_gather", x, static_cast<std::int64_t>(x.nbytes()));
  auto sizes = x.sizes().vec();
  sizes[0] *= size_;
  const torch::Tensor in = on_host(x);                               // [n, ...]
  torch::Tensor out = torch::empty(sizes, in.options());             // [P*n, ...]
  CHECK_MPI(MPI_Allgather(in.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, comm_));
  return like_device(out, x);
}

torch::Tensor MpiCommunicator::reduce_scatter_sum(const torch::Tensor& x) {   // [P*n, ...]
  check_tensor("reduce_scatter_sum", x);
  ULY_CHECK(x.dim() >= 1 && x.size(0) % size_ == 0,
            "reduce_scatter_sum: dim 0 of tensor {} must be divisible by the group size {}", shape_of(x), size_);
  const auto t = x.scalar_type();
  const bool narrow = t == torch::kBFloat16 || t == torch::kHalf;
  const torch::Tensor in = on_host(x).to(narrow ? torch::kFloat : t).contiguous();   // [P*n, ...]
  const MPI_Datatype type = sum_type(in.scalar_type());
  const std::int64_t count = in.numel() / size_;
  ULY_CHECK(count <= INT_MAX, "reduce_scatter_sum: {} elements per rank (tensor {}) exceed MPI's int count limit {}",
            count, shape_of(x), INT_MAX);
  torch::Tensor out = torch::empty_like(in.chunk(size_)[0]);        // [n, ...]
  CHECK_MPI(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), static_cast<int>(count), type, MPI_SUM, comm_));
  return like_device(out.to(t), x);
}

void MpiCommunicator::broadcast(torch::Tensor& x, int root) {
  check_tensor("broadcast", x);
  ULY_CHECK(root >= 0 && root < size_, "broadcast: root {} outside a group of {}", root, size_);
  torch::Tensor host = on_host(x);
  auto* data = static_cast<char*>(host.data_ptr());
  in_int_pieces(static_cast<std::int64_t>(host.nbytes()), [&](std::int64_t begin, int count) {
    CHECK_MPI(MPI_Bcast(data + begin, count, MPI_BYTE, root, comm_));
  });
  if (!x.device().is_cpu()) x.copy_(host);
}

void MpiCommunicator::barrier() { CHECK_MPI(MPI_Barrier(comm_)); }

void MpiCommunicator::check_peers(const torch::Tensor& x, int to, int from) const {
  check_tensor("send_recv", x);
  ULY_CHECK(to >= 0 && to < size_ && from >= 0 && from < size_,
            "send_recv: to {} and from {} must be ranks of a group of {}", to, from, size_);
}

torch::Tensor MpiCommunicator::send_recv(const torch::Tensor& x, int to, int from) {   // [...]
  check_peers(x, to, from);
  const torch::Tensor in = on_host(x);
  torch::Tensor out = torch::empty_like(in);   // [...]
  const auto* send = static_cast<const char*>(in.data_ptr());
  auto* recv = static_cast<char*>(out.data_ptr());
  in_int_pieces(static_cast<std::int64_t>(in.nbytes()), [&](std::int64_t begin, int count) {
    CHECK_MPI(MPI_Sendrecv(send + begin, count, MPI_BYTE, to, /*sendtag=*/0, recv + begin, count, MPI_BYTE, from,
                           /*recvtag=*/0, comm_, MPI_STATUS_IGNORE));
  });
  return like_device(out, x);
}

namespace {

// MPI_Isend / MPI_Irecv of the bytes in pieces of at most INT_MAX, posted at once; wait() completes them all. Holds
// the host copy it sends from and the buffer it receives into until then.
class MpiExchange final : public Communicator::Exchange {
 public:
  MpiExchange(const torch::Tensor& x, int to, int from, MPI_Comm comm)
      : like_(x), in_(on_host(x)), out_(torch::empty_like(in_)) {
    const auto* send = static_cast<const char*>(in_.data_ptr());
    auto* recv = static_cast<char*>(out_.data_ptr());
    in_int_pieces(static_cast<std::int64_t>(in_.nbytes()), [&](std::int64_t begin, int count) {
      MPI_Request& r = requests_.emplace_back();
      CHECK_MPI(MPI_Irecv(recv + begin, count, MPI_BYTE, from, /*tag=*/1, comm, &r));
      MPI_Request& s = requests_.emplace_back();
      CHECK_MPI(MPI_Isend(send + begin, count, MPI_BYTE, to, /*tag=*/1, comm, &s));
    });
  }
  ~MpiExchange() override {   // never waited (an exception between start and wait): finish before the buffers go
    if (!requests_.empty()) MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }
  torch::Tensor wait() override {
    CHECK_MPI(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
    return like_device(out_, like_);
  }

 private:
  torch::Tensor like_, in_, out_;
  std::vector<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Communicator::Exchange> MpiCommunicator::start_send_recv(const torch::Tensor& x, int to, int from) {
  check_peers(x, to, from);
  return std::make_unique<MpiExchange>(x, to, from, comm_);
}

}  // namespace ulysses::comm

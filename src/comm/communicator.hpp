// Communicator: the collectives the trainer needs, over torch::Tensor, for one process group.
//
// One interface, two backends: MPI (mpi_communicator.hpp; CPU tensors, and CUDA tensors staged through
// host memory — the debugging path) and NCCL (nccl_communicator.hpp; CUDA tensors, the CUDA build only).
// backend.hpp makes either. Every rank of the group calls the same collectives in the same order with
// tensors of the same shape and dtype (send_recv: the two ranks of each pair). All tensors must be contiguous;
// results live on the input's device.
#pragma once

#include <memory>

#include <torch/types.h>

namespace ulysses::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // x: [size() * n, ...] → out: [size() * n, ...]; out chunk j (rows [j*n, (j+1)*n)) is rank j's
  // chunk rank(). This exchange is its own adjoint (the Ulysses backward uses it unchanged).
  virtual torch::Tensor all_to_all(const torch::Tensor& x) = 0;
  virtual void all_reduce_sum(torch::Tensor& x) = 0;                  // in place
  virtual torch::Tensor all_gather(const torch::Tensor& x) = 0;       // [n, ...] → [size() * n, ...]
  // The same into `out` [size() * n, ...] (contiguous, x's dtype and device), made by the caller — on the stream
  // that will use it, when the gather runs on another (model/side_stream.hpp).
  virtual void all_gather_into(const torch::Tensor& x, torch::Tensor& out) { out.copy_(all_gather(x)); }
  // x: [size() * n, ...] → [n, ...]: this rank's chunk of the elementwise sum over ranks
  virtual torch::Tensor reduce_scatter_sum(const torch::Tensor& x) = 0;
  virtual void broadcast(torch::Tensor& x, int root) = 0;             // in place
  virtual void barrier() = 0;
  // Point to point, the ring's step: sends x to rank `to` and returns what rank `from` sent, a tensor of x's shape
  // and dtype. The send and the receive are one call, so a ring of ranks that all call it cannot deadlock; `to` and
  // `from` may be this rank. Every rank of a pair calls it with the same shape and dtype.
  virtual torch::Tensor send_recv(const torch::Tensor& x, int to, int from) = 0;

  // The same step begun, to be finished later: the caller computes in between, and the exchange overlaps that work
  // where the backend moves data on its own. x must stay unchanged until wait(); wait() is called once. Every rank
  // of a pair begins its exchanges in the same order. The default exchanges at once (send_recv) and wait() hands the
  // result over.
  class Exchange {
   public:
    virtual ~Exchange() = default;
    virtual torch::Tensor wait() = 0;   // what rank `from` sent: x's shape and dtype
  };
  virtual std::unique_ptr<Exchange> start_send_recv(const torch::Tensor& x, int to, int from);
};

}  // namespace ulysses::comm

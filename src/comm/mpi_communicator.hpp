// MpiCommunicator: the Communicator collectives over one MPI communicator.
//
// CPU tensors go to MPI directly. Tensors on another device (CUDA) are staged through host memory: copied
// to the CPU (which waits for the device's current stream), exchanged, and copied back to their device.
// That is slow and meant for debugging and tests (`ulysses-train --comm mpi`: several ranks sharing one
// GPU, results compared bit for bit with NCCL); NCCL is the backend for real GPU runs.
//
// Dtypes: float32, float64, bfloat16, float16, int64, int32, uint8. Data moves as bytes, so every
// dtype is exchanged bit-exactly; all_reduce_sum adds float32/float64/int64/int32 with MPI_SUM and
// bfloat16/float16 in a float32 temporary (cast back once at the end); uint8 is not summed.
// Every tensor is checked (defined, contiguous, supported dtype, dim-0 divisible where the collective
// needs it) before any MPI call, with the numbers in the message; such a failure is raised on every
// rank alike when the ranks agree on shapes. What cannot be checked locally is the caller's contract:
// all ranks of the group call the same collectives in the same order, with the same dtype and shape
// (broadcast, all_reduce_sum, all_to_all) or the same shape per rank (all_gather); send_recv: MPI_Sendrecv of the
// bytes, in pieces of at most INT_MAX (both ranks of a pair cut the same pieces from the same shape);
// start_send_recv: the same pieces as MPI_Isend / MPI_Irecv (tag 1), finished by the Exchange's wait().
// Borrows the MPI_Comm (e.g. from dist::ProcessGroups), which must outlive this object.
#pragma once

#include <mpi.h>

#include "comm/communicator.hpp"

namespace ulysses::comm {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);

  int size() const override { return size_; }
  int rank() const override { return rank_; }

  torch::Tensor all_to_all(const torch::Tensor& x) override;       // [P*n, ...] → [P*n, ...]
  void all_reduce_sum(torch::Tensor& x) override;                   // [...] in place
  torch::Tensor all_gather(const torch::Tensor& x) override;        // [n, ...] → [P*n, ...]
  torch::Tensor reduce_scatter_sum(const torch::Tensor& x) override; // [P*n, ...] → [n, ...]
  void broadcast(torch::Tensor& x, int root) override;              // [...] in place
  void barrier() override;
  torch::Tensor send_recv(const torch::Tensor& x, int to, int from) override;   // [...] → [...] from `from`
  // MPI_Isend / MPI_Irecv posted now, completed by wait() (MPI moves the data during other MPI calls and wait())
  std::unique_ptr<Exchange> start_send_recv(const torch::Tensor& x, int to, int from) override;

 private:
  void check_peers(const torch::Tensor& x, int to, int from) const;   // send_recv's tensor and ranks
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
};

}  // namespace ulysses::comm

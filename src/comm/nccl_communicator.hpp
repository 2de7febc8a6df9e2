// NcclCommunicator: the Communicator collectives over one NCCL communicator, for CUDA tensors (CUDA build).
//
// One NCCL communicator per process group: rank 0 of the MPI sub-communicator makes the unique id and
// broadcasts it over that sub-communicator, then every rank joins on its GPU. Collectives are enqueued on
// the current CUDA stream of that GPU (PyTorch's, so the caching allocator and the compute around them
// stay ordered) and return without waiting. all_to_all uses ncclAlltoAll where NCCL has it (≥ 2.28) and
// grouped ncclSend/ncclRecv otherwise or with ULYSSES_NCCL_SEND_RECV=1 (both paths are always compiled); all_reduce_sum and reduce_scatter_sum add bfloat16/float16 in a
// float32 temporary, as the MPI backend does; send_recv is one ncclSend and one ncclRecv in a group, and
// start_send_recv the same on the communicator's own side stream (the ring's K/V blocks overlap its attention).
// Every NCCL call is checked (file:line, NCCL's message).
//
// Hangs and failures end the job: a dist::Watchdog watches each collective from before it is issued (NCCL
// connects peers lazily inside the first one and blocks there when a peer is missing; the communicator's
// init is watched the same way), then polls an event recorded after it and ncclCommGetAsyncError. An error,
// or a collective still unfinished after `timeout`, ends every rank (MPI_Abort) with one line naming the
// collective, its size and group — the job first: ncclCommAbort could wait behind a spinning kernel.
// Teardown while an exception unwinds stops the watchdog and leaves the communicator to the ending process,
// neither destroyed (destroy flushes pending work that may wait on peers blocked in a collective) nor aborted
// (ncclCommAbort can hang when only some ranks abort).
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "dist/watchdog.hpp"

namespace ulysses::comm {

class NcclCommunicator final : public Communicator {
 public:
  // group: the MPI sub-communicator of this process group (borrowed for the constructor only);
  // device: this rank's CUDA device index; timeout: the watchdog's limit per collective (0: none).
  NcclCommunicator(MPI_Comm group, int device, std::chrono::seconds timeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return size_; }
  int rank() const override { return rank_; }

  torch::Tensor all_to_all(const torch::Tensor& x) override;         // [P*n, ...] → [P*n, ...]
  void all_reduce_sum(torch::Tensor& x) override;                     // [...] in place
  torch::Tensor all_gather(const torch::Tensor& x) override;          // [n, ...] → [P*n, ...]
  void all_gather_into(const torch::Tensor& x, torch::Tensor& out) override;   // [n, ...] → out [P*n, ...]
  torch::Tensor reduce_scatter_sum(const torch::Tensor& x) override;  // [P*n, ...] → [n, ...]
  void broadcast(torch::Tensor& x, int root) override;                // [...] in place
  void barrier() override;                                            // waits for the device too
  torch::Tensor send_recv(const torch::Tensor& x, int to, int from) override;   // [...] → [...] from `from`
  // The same on this communicator's side stream (after what the current stream has queued), so that the compute
  // stream's kernels run while it moves; wait() makes the current stream wait for it.
  std::unique_ptr<Exchange> start_send_recv(const torch::Tensor& x, int to, int from) override;

 private:
  struct State;   // the ncclComm_t and the watchdog (keeps <nccl.h> out of this header)
  dist::Watchdog::Call begin(const std::string& op, const torch::Tensor& x);   // before the NCCL call
  void issued(dist::Watchdog::Call& call);                                     // after it: watch its event
  std::unique_ptr<State> state_;
  int size_ = 1, rank_ = 0, device_ = 0;
};

}  // namespace ulysses::comm

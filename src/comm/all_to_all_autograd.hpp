// all_to_all_autograd: Communicator::all_to_all as a differentiable op — the Ulysses primitive.
//
// Forward: comm.all_to_all(x) — x [P*n, ...] → [P*n, ...], out chunk j = rank j's chunk rank().
// Backward: the same exchange applied to the gradient. The exchange moves element (rank j, chunk r)
// to (rank r, chunk j), a transposition, so it is its own inverse and, being a permutation, its own
// adjoint. Every rank of the group must run forward and backward in the same order (autograd does,
// given the same graph on every rank). The communicator must outlive the backward pass.
// Reshapes around the exchange ([B, S/P, H, D] ↔ chunks of heads or sequence) belong to the caller.
#pragma once

#include <torch/types.h>

#include "comm/communicator.hpp"

namespace ulysses::comm {

torch::Tensor all_to_all_autograd(Communicator& comm, const torch::Tensor& x);   // [P*n, ...]

}  // namespace ulysses::comm

#include "comm/all_to_all_autograd.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace ulysses::comm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries the communicator to backward through ctx->saved_data (which holds IValues only).
struct CommRef : torch::CustomClassHolder {
  explicit CommRef(Communicator& c) : comm(c) {}
  Communicator& comm;
};

struct AllToAll : torch::autograd::Function<AllToAll> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator& comm) {
    ctx->saved_data["comm"] = c10::IValue::make_capsule(c10::make_intrusive<CommRef>(comm));
    return comm.all_to_all(x.contiguous());                    // [P*n, ...]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto& comm = static_cast<CommRef&>(*ctx->saved_data["comm"].toCapsule()).comm;
    return {comm.all_to_all(grad_out[0].contiguous()), torch::Tensor()};   // d/dx, none for comm
  }
};

}  // namespace

torch::Tensor all_to_all_autograd(Communicator& comm, const torch::Tensor& x) {
  return AllToAll::apply(x, comm);
}

}  // namespace ulysses::comm

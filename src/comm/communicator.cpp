#include "comm/communicator.hpp"

namespace ulysses::comm {
namespace {

// An exchange already finished: its result, handed over by wait().
class Finished final : public Communicator::Exchange {
 public:
  explicit Finished(torch::Tensor result) : result_(std::move(result)) {}
  torch::Tensor wait() override { return std::move(result_); }

 private:
  torch::Tensor result_;
};

}  // namespace

std::unique_ptr<Communicator::Exchange> Communicator::start_send_recv(const torch::Tensor& x, int to, int from) {
  return std::make_unique<Finished>(send_recv(x, to, from));
}

}  // namespace ulysses::comm

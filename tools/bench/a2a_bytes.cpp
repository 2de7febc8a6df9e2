// Bytes moved by the Ulysses all-to-alls, per layer per rank, against the theory
//   4 · S · hidden / P · (P−1)/P · bytes per element      (forward: q, k, v out and the output back; MHA)
// Run under mpiexec -n P. A counting decorator around the real MPI communicator records what each
// exchange sends to other ranks (the chunk a rank keeps for itself does not travel).
//
// usage: mpiexec -n P a2a_bytes CONFIG.json SEQ_LEN
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include "comm/mpi_communicator.hpp"
#include "dist/mpi_world.hpp"
#include "arch/model_config.hpp"
#include "core/sequence_parallel.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"

namespace {

class CountingCommunicator final : public ulysses::comm::Communicator {
 public:
  explicit CountingCommunicator(ulysses::comm::Communicator& inner) : inner_(inner) {}
  int size() const override { return inner_.size(); }
  int rank() const override { return inner_.rank(); }
  torch::Tensor all_to_all(const torch::Tensor& x) override {
    const double bytes = static_cast<double>(x.numel() * x.element_size());
    sent += bytes * (size() - 1) / size();
    ++calls;
    return inner_.all_to_all(x);
  }
  void all_reduce_sum(torch::Tensor& x) override { inner_.all_reduce_sum(x); }
  torch::Tensor all_gather(const torch::Tensor& x) override { return inner_.all_gather(x); }
  torch::Tensor reduce_scatter_sum(const torch::Tensor& x) override { return inner_.reduce_scatter_sum(x); }
  void broadcast(torch::Tensor& x, int root) override { inner_.broadcast(x, root); }
  void barrier() override { inner_.barrier(); }
  double sent = 0;
  int calls = 0;

 private:
  ulysses::comm::Communicator& inner_;
};

}  // namespace

int main(int argc, char** argv) {
  ulysses::dist::MpiWorld world(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpiexec -n P %s CONFIG.json SEQ_LEN\n", argv[0]);
    return 2;
  }
  const auto cfg = ulysses::arch::read_model_config(argv[1]);
  const std::int64_t S = std::atoll(argv[2]), P = world.size(), L = S / P;
  ulysses::comm::MpiCommunicator mpi(MPI_COMM_WORLD);
  CountingCommunicator counting(mpi);
  ulysses::model::CausalLm model(
      cfg, ulysses::SequenceParallel(ulysses::RankLayout(world.size(), world.size()), world.rank(), &counting));
  ulysses::model::init_weights(model, 1);
  auto ids = torch::randint(cfg.vocab_size, {1, L}, torch::kInt64);                  // [1, S/P]
  auto pos = torch::arange(world.rank() * L, (world.rank() + 1) * L).view({1, L});  // [1, S/P]
  auto docs = torch::zeros({1, S}, torch::kInt64);                                  // [1, S] one document
  auto out = model->forward(ids, pos, docs, ids);
  const double forward = counting.sent;
  const int forward_calls = counting.calls;
  out.loss_sum.backward();
  const double theory = 4.0 * static_cast<double>(S * cfg.hidden_size) / P * (P - 1) / P * 4;
  const double per_layer = forward / static_cast<double>(cfg.num_layers);
  if (world.rank() == 0)
    fmt::print("P={} S={} hidden={} heads={} kv={} layers={}: {} all-to-alls forward; per layer per rank: "
               "forward {:.0f} bytes, forward+backward {:.0f} bytes; theory (MHA, fp32) 4·S·hidden/P·(P−1)/P·4 = {:.0f}; "
               "RATIO forward/theory = {:.3f}\n",
               P, S, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.num_layers, forward_calls, per_layer,
               counting.sent / static_cast<double>(cfg.num_layers), theory, per_layer / theory);
  return 0;
}

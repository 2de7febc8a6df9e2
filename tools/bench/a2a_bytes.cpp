// Bytes the Ulysses all-to-alls hand to MPI, per layer per rank, against the theory
//   (q + k + v + out) = S/P · (H + 2·max(Hkv, P) + H) · D · (P−1)/P · bytes per element      (forward)
// — H query heads, Hkv key/value heads replicated up to P when Hkv < P, D head dim; the backward sends the
// same again. Measured below the communicator: this program defines MPI_Alltoall itself (the MPI
// profiling interface), counts what each call sends to the other ranks (the chunk a rank keeps for itself
// does not travel) and forwards to PMPI_Alltoall. Run under mpiexec -n P.
//
// usage: mpiexec -n P a2a_bytes CONFIG.json SEQ_LEN
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include "arch/model_config.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/sequence_parallel.hpp"
#include "dist/mpi_world.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"

namespace {
double g_sent = 0;   // bytes sent to other ranks by MPI_Alltoall on this rank
int g_calls = 0;
}  // namespace

extern "C" int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                            MPI_Datatype recvtype, MPI_Comm comm) {
  int size = 1, type_bytes = 1;
  MPI_Comm_size(comm, &size);
  MPI_Type_size(sendtype, &type_bytes);
  g_sent += static_cast<double>(sendcount) * type_bytes * (size - 1);
  ++g_calls;
  return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int main(int argc, char** argv) {
  ulysses::dist::MpiWorld world(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpiexec -n P %s CONFIG.json SEQ_LEN\n", argv[0]);
    return 2;
  }
  const auto cfg = ulysses::arch::read_model_config(argv[1]);
  const std::int64_t S = std::atoll(argv[2]), P = world.size(), L = S / P;
  ulysses::comm::MpiCommunicator mpi(MPI_COMM_WORLD);
  ulysses::model::CausalLm model(
      cfg, ulysses::SequenceParallel(ulysses::RankLayout(world.size(), world.size()), world.rank(), &mpi));
  ulysses::model::init_weights(model, 1);
  auto ids = torch::randint(cfg.vocab_size, {1, L}, torch::kInt64);                  // [1, S/P]
  auto pos = torch::arange(world.rank() * L, (world.rank() + 1) * L).view({1, L});  // [1, S/P]
  auto docs = torch::zeros({1, S}, torch::kInt64);                                  // [1, S] one document
  g_sent = 0;
  g_calls = 0;
  auto out = model->forward(ids, pos, docs, ids);
  const double forward = g_sent / static_cast<double>(cfg.num_layers);
  const int forward_calls = g_calls;
  out.loss_sum.backward();
  const double both = g_sent / static_cast<double>(cfg.num_layers);
  const double heads = static_cast<double>(2 * cfg.num_heads + 2 * std::max(cfg.num_kv_heads, P));
  const double theory = static_cast<double>(L) * heads * static_cast<double>(cfg.head_dim) * (P - 1) / P * 4;
  if (world.rank() == 0)
    fmt::print("P={} S={} heads={} kv={}{} layers={}: {} all-to-alls forward; per layer per rank sent to MPI: "
               "forward {:.0f} bytes (theory {:.0f}), forward+backward {:.0f} (theory {:.0f})\n"
               "RATIO measured/theory (H={} Hkv={} P={}) = {:.3f}  (target 1.000)\n",
               P, S, cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads < P ? " (replicated to P)" : "",
               cfg.num_layers, forward_calls, forward, theory, both, 2 * theory, cfg.num_heads, cfg.num_kv_heads, P,
               both / (2 * theory));
  return 0;
}

// Bytes the Ulysses all-to-alls and the ring hand to MPI, per layer per rank, against the theory (fp32, 4 bytes):
//   all-to-alls (q + k + v + out) = S/P · (H + 2·max(Hkv, U) + H) · D · (U−1)/U · 4      (forward; backward the same)
//   ring (--sp-ring R)             = (R−1) · K forward, (R−1) · K + R · K backward, K = 2 · S/R · max(Hkv, U)/U · D · 4
// — P = U × R ranks (U = P without a ring), H query heads, Hkv key/value heads replicated up to U when Hkv < U, D
// head dim; the ring's backward sends the k/v blocks round again and their gradients R times (the last brings each
// home). Measured below the communicator: this program defines MPI_Alltoall, MPI_Sendrecv and MPI_Isend itself (the MPI
// profiling interface), counts what each call sends to the other ranks (the chunk a rank keeps for itself
// does not travel) and forwards to PMPI_. Run under mpiexec -n P.
//
// usage: mpiexec -n P a2a_bytes CONFIG.json SEQ_LEN [RING]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include "arch/model_config.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/sequence_parallel.hpp"
#include "dist/mpi_world.hpp"
#include "dist/process_groups.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"

namespace {
double g_sent = 0;        // bytes sent to other ranks by MPI_Alltoall on this rank
double g_ring_sent = 0;   // by MPI_Sendrecv and MPI_Isend
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

extern "C" int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                            void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                            MPI_Comm comm, MPI_Status* status) {
  int type_bytes = 1, me = 0;
  MPI_Type_size(sendtype, &type_bytes);
  MPI_Comm_rank(comm, &me);
  if (dest != me) g_ring_sent += static_cast<double>(sendcount) * type_bytes;
  return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm,
                       status);
}

extern "C" int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                         MPI_Request* request) {
  int type_bytes = 1, me = 0;
  MPI_Type_size(type, &type_bytes);
  MPI_Comm_rank(comm, &me);
  if (dest != me) g_ring_sent += static_cast<double>(count) * type_bytes;
  return PMPI_Isend(buf, count, type, dest, tag, comm, request);
}

int main(int argc, char** argv) {
  ulysses::dist::MpiWorld world(argc, argv);
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: mpiexec -n P %s CONFIG.json SEQ_LEN [RING]\n", argv[0]);
    return 2;
  }
  const auto cfg = ulysses::arch::read_model_config(argv[1]);
  const std::int64_t S = std::atoll(argv[2]), P = world.size(), L = S / P, R = argc == 4 ? std::atoll(argv[3]) : 1;
  const std::int64_t U = P / R;
  const ulysses::RankLayout layout(world.size(), world.size(), static_cast<int>(R));
  ulysses::dist::ProcessGroups groups(layout);
  ulysses::comm::MpiCommunicator ulysses_group(groups.ulysses()), ring_group(R > 1 ? groups.ring() : MPI_COMM_SELF);
  ulysses::model::CausalLm model(
      cfg, ulysses::SequenceParallel(layout, world.rank(), &ulysses_group, R > 1 ? &ring_group : nullptr));
  ulysses::model::init_weights(model, 1);
  auto ids = torch::randint(cfg.vocab_size, {1, L}, torch::kInt64);                  // [1, S/P]
  auto pos = torch::arange(world.rank() * L, (world.rank() + 1) * L).view({1, L});  // [1, S/P]
  auto docs = torch::zeros({1, S}, torch::kInt64);                                  // [1, S] one document
  g_sent = g_ring_sent = 0;
  g_calls = 0;
  auto out = model->forward(ids, pos, docs, ids);
  const double layers = static_cast<double>(cfg.num_layers);
  const double forward = g_sent / layers, ring_forward = g_ring_sent / layers;
  const int forward_calls = g_calls;
  out.loss_sum.backward();
  const double both = g_sent / layers, ring_both = g_ring_sent / layers;
  const double heads = static_cast<double>(2 * cfg.num_heads + 2 * std::max(cfg.num_kv_heads, U));
  const double theory = static_cast<double>(L) * heads * static_cast<double>(cfg.head_dim) * (U - 1) / U * 4;
  const double block = 2.0 * static_cast<double>(S / R * std::max(cfg.num_kv_heads, U) / U * cfg.head_dim) * 4;
  const double ring_theory = static_cast<double>(R - 1) * block, ring_theory_both = static_cast<double>(3 * R - 2) * block;
  if (world.rank() == 0) {
    fmt::print("P={} (U={} × R={}) S={} heads={} kv={}{} layers={}: {} all-to-alls forward; per layer per rank sent to "
               "MPI: forward {:.0f} bytes (theory {:.0f}), forward+backward {:.0f} (theory {:.0f})\n",
               P, U, R, S, cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads < U ? " (replicated to U)" : "",
               cfg.num_layers, forward_calls, forward, theory, both, 2 * theory);
    if (U > 1)   // U = 1: no all-to-all, nothing to compare
      fmt::print("RATIO measured/theory (H={} Hkv={} {}={}) = {:.3f}  (target 1.000)\n", cfg.num_heads, cfg.num_kv_heads,
                 R > 1 ? "U" : "P", U, both / (2 * theory));
    if (R > 1)
      fmt::print("ring: per layer per rank forward {:.0f} bytes (theory {:.0f}), forward+backward {:.0f} (theory {:.0f})\n"
                 "RATIO ring measured/theory (H={} Hkv={} U={} R={}) = {:.3f}  (target 1.000)\n",
                 ring_forward, ring_theory, ring_both, ring_theory_both, cfg.num_heads, cfg.num_kv_heads, U, R,
                 ring_both / ring_theory_both);
  }
  return 0;
}

// MpiCommunicator and all_to_all_autograd under mpiexec (-n 1, 2, 4), against references computed
// locally from known per-rank inputs.
//
// all_to_all data encodes (source rank, chunk, index) in each element, so any misplaced chunk shows;
// values stay below 256 so they are exact in every dtype (uint8 and bfloat16 included). The autograd
// test compares the gradient with central finite differences of the global loss. Collectives run
// unconditionally on every rank; assertions come after them.
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/types.h>

#include "comm/all_to_all_autograd.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/rank_layout.hpp"
#include "dist/process_groups.hpp"

using ulysses::RankLayout;
using ulysses::comm::MpiCommunicator;
using ulysses::comm::all_to_all_autograd;
using ulysses::dist::ProcessGroups;

namespace {

const std::vector<torch::ScalarType> kAllDtypes = {torch::kFloat, torch::kDouble, torch::kBFloat16,
                                                   torch::kHalf,  torch::kLong,   torch::kInt,
                                                   torch::kByte};
constexpr std::int64_t kRows = 2, kCols = 3, kChunk = kRows * kCols;   // one chunk: [kRows, kCols]

// What rank `src` sends in a group of p: [p*kRows, kCols]; element i of chunk j is
// (src*p + j)*kChunk + i.
torch::Tensor encoded(int src, int p, torch::ScalarType dtype) {
  torch::Tensor flat = torch::arange(p * kChunk, torch::kLong) + src * p * kChunk;   // [p*kChunk]
  return flat.reshape({p * kRows, kCols}).to(dtype);
}

// What rank r must receive: chunk j is rank j's chunk r. [p*kRows, kCols]
torch::Tensor expected_all_to_all(int r, int p, torch::ScalarType dtype) {
  std::vector<torch::Tensor> chunks;
  for (int j = 0; j < p; ++j)
    chunks.push_back(torch::arange(kChunk, torch::kLong) + (j * p + r) * kChunk);   // [kChunk]
  return torch::cat(chunks).reshape({p * kRows, kCols}).to(dtype);
}

// Rank q's input to the reductions: small integers, exact in every dtype. [kRows, kCols]
torch::Tensor rank_input(int q, torch::ScalarType dtype) {
  return (torch::arange(kChunk, torch::kLong).reshape({kRows, kCols}) * (q + 1) + 10 * q).to(dtype);
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "no error";
}

class Mpi : public testing::Test {
 protected:
  static void SetUpTestSuite() { at::set_num_threads(1); }   // ranks share the cores
  MpiCommunicator world{MPI_COMM_WORLD};
  const int p = world.size(), r = world.rank();
};

TEST_F(Mpi, AllToAllSendsChunkJToRankJInEveryDtype) {
  ASSERT_LE(p * p * kChunk, 256) << "encoding must stay exact in uint8/bfloat16";
  for (auto dtype : kAllDtypes) {
    torch::Tensor out = world.all_to_all(encoded(r, p, dtype));      // [p*kRows, kCols]
    EXPECT_TRUE(torch::equal(out, expected_all_to_all(r, p, dtype)))
        << c10::toString(dtype) << " on rank " << r << ":\n" << out;
  }
}

TEST_F(Mpi, AllToAllWithinEachSpGroup) {
  const int sp = p % 2 == 0 ? 2 : 1;
  ProcessGroups groups{RankLayout(p, sp)};
  MpiCommunicator sp_comm(groups.sp());
  ASSERT_EQ(sp_comm.size(), sp);
  torch::Tensor out = sp_comm.all_to_all(encoded(sp_comm.rank(), sp, torch::kFloat));
  EXPECT_TRUE(torch::equal(out, expected_all_to_all(sp_comm.rank(), sp, torch::kFloat))) << out;
}

TEST_F(Mpi, AllToAllTwiceIsTheIdentity) {
  torch::manual_seed(static_cast<std::uint64_t>(1000 + r));
  for (auto dtype : kAllDtypes) {
    torch::Tensor x = torch::randint(0, 200, {p * 3, 4, 5}, torch::kLong).to(dtype);   // [P*3, 4, 5]
    if (torch::isFloatingType(dtype)) x = torch::randn({p * 3, 4, 5}).to(dtype);
    EXPECT_TRUE(torch::equal(world.all_to_all(world.all_to_all(x)), x)) << c10::toString(dtype);
  }
}

TEST_F(Mpi, AllToAllAutogradGradientMatchesFiniteDifferences) {
  torch::manual_seed(static_cast<std::uint64_t>(7 + r));
  const torch::Tensor x = torch::randn({p * 2, 3}, torch::kDouble);   // [P*2, 3], differs per rank
  const torch::Tensor w = torch::randn({p * 2, 3}, torch::kDouble);   // [P*2, 3]

  // Autograd: each rank differentiates its own L_r = sum(w_r * a2a(x)_r); the backward exchange
  // brings every rank's contribution, so x.grad is d(sum_r L_r)/dx_r.
  torch::Tensor xg = x.clone().requires_grad_(true);
  (w * all_to_all_autograd(world, xg)).sum().backward();
  const torch::Tensor grad = xg.grad();                               // [P*2, 3]

  auto global_loss = [&](const torch::Tensor& xs) {                   // sum_r L_r, on every rank
    torch::NoGradGuard no_grad;
    torch::Tensor loss = (w * all_to_all_autograd(world, xs)).sum();  // []
    world.all_reduce_sum(loss);
    return loss.item<double>();
  };
  const double h = 1e-3;
  for (int q = 0; q < p; ++q) {                                       // perturb rank q's x only
    for (std::int64_t c : {std::int64_t{0}, std::int64_t{4}, x.numel() - 1}) {
      torch::Tensor plus = x.clone(), minus = x.clone();
      if (r == q) {
        plus.view({-1})[c] += h;
        minus.view({-1})[c] -= h;
      }
      const double fd = (global_loss(plus) - global_loss(minus)) / (2 * h);
      if (r == q) {
        EXPECT_NEAR(grad.view({-1})[c].item<double>(), fd, 1e-9) << "rank " << q << " coord " << c;
      }
    }
  }
}

TEST_F(Mpi, AllReduceSumMatchesTheLocalSum) {
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kLong, torch::kInt, torch::kBFloat16,
                     torch::kHalf}) {
    torch::Tensor x = rank_input(r, dtype);
    world.all_reduce_sum(x);
    torch::Tensor sum = torch::zeros({kRows, kCols}, torch::kDouble);
    for (int q = 0; q < p; ++q) sum += rank_input(q, dtype).to(torch::kDouble);
    EXPECT_TRUE(torch::equal(x, sum.to(dtype))) << c10::toString(dtype) << ":\n" << x;
  }
}

TEST_F(Mpi, AllReduceSumKeepsInt64Exact) {   // 2^60 + q is not representable as a double
  torch::Tensor x = torch::full({3}, (std::int64_t{1} << 60) + r, torch::kLong);
  world.all_reduce_sum(x);
  const std::int64_t expected = p * (std::int64_t{1} << 60) + p * (p - 1) / 2;
  EXPECT_TRUE(torch::equal(x, torch::full({3}, expected, torch::kLong))) << x;
}

TEST_F(Mpi, AllReduceSumOfBFloat16AccumulatesInFloat32) {
  // 256 on rank 0, 1 elsewhere: float32 gives 256 + (P-1), one rounding to bfloat16 (260 at P=4);
  // adding in bfloat16 would lose the 1s (256 or 258).
  torch::Tensor x = torch::full({4}, r == 0 ? 256.0 : 1.0, torch::kBFloat16);
  world.all_reduce_sum(x);
  const torch::Tensor expected = torch::full({4}, 256.0 + (p - 1), torch::kFloat).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(x, expected)) << x;
}

TEST_F(Mpi, AllGatherConcatenatesRanksInOrder) {
  for (auto dtype : kAllDtypes) {
    torch::Tensor out = world.all_gather(rank_input(r, dtype));       // [P*kRows, kCols]
    std::vector<torch::Tensor> parts;
    for (int q = 0; q < p; ++q) parts.push_back(rank_input(q, dtype));
    EXPECT_TRUE(torch::equal(out, torch::cat(parts))) << c10::toString(dtype) << ":\n" << out;
  }
}

TEST_F(Mpi, ReduceScatterSumGivesEachRankItsChunkOfTheSum) {
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kLong, torch::kInt, torch::kBFloat16, torch::kHalf}) {
    // rank q sends chunks j = 0..P-1 of rank_input(q) + 8j ([P*kRows, kCols]); sums stay exact below 256
    std::vector<torch::Tensor> chunks;
    for (int j = 0; j < p; ++j) chunks.push_back(rank_input(r, torch::kLong) + 8 * j);
    torch::Tensor out = world.reduce_scatter_sum(torch::cat(chunks).to(dtype));   // [kRows, kCols]
    torch::Tensor sum = torch::full({kRows, kCols}, 8.0 * p * r, torch::kDouble);  // this rank's chunk: j = r
    for (int q = 0; q < p; ++q) sum += rank_input(q, torch::kDouble);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(out, sum.to(dtype))) << c10::toString(dtype) << " on rank " << r << ":\n" << out;
  }
}

TEST_F(Mpi, BroadcastCopiesTheRootEverywhere) {
  const int root = p - 1;
  for (auto dtype : kAllDtypes) {
    torch::Tensor x = rank_input(r, dtype);
    world.broadcast(x, root);
    EXPECT_TRUE(torch::equal(x, rank_input(root, dtype))) << c10::toString(dtype) << ":\n" << x;
  }
  world.barrier();
}

// The ring's step: rank r sends to r+1 and receives from r-1 (mod P) — every dtype, bytes exact; then a pair that
// exchanges with itself (to = from = r) and, at P >= 2, the ring the other way round.
TEST_F(Mpi, SendRecvPassesEachRanksTensorAroundTheRing) {
  const int next = (r + 1) % p, previous = (r + p - 1) % p;
  for (auto dtype : kAllDtypes) {
    const torch::Tensor got = world.send_recv(rank_input(r, dtype), next, previous);   // [kRows, kCols]
    EXPECT_TRUE(torch::equal(got, rank_input(previous, dtype))) << c10::toString(dtype) << " on rank " << r;
  }
  EXPECT_TRUE(torch::equal(world.send_recv(rank_input(r, torch::kFloat), r, r), rank_input(r, torch::kFloat)));
  const torch::Tensor back = world.send_recv(encoded(r, p, torch::kBFloat16), previous, next);   // [p*kRows, kCols]
  EXPECT_TRUE(torch::equal(back, encoded(next, p, torch::kBFloat16))) << "rank " << r;
  const std::string bad = "to " + std::to_string(p) + " and from 0 must be ranks of a group of " + std::to_string(p);
  EXPECT_NE(error_of([&] { world.send_recv(rank_input(r, torch::kFloat), p, 0); }).find(bad), std::string::npos);
}

// The ring's step begun and finished later, two in flight at once in opposite directions (as the ring's backward has
// a block's k/v and the previous block's gradient): each wait() returns what its sender sent, every dtype.
TEST_F(Mpi, StartedSendRecvsFinishWithTheRightTensors) {
  const int next = (r + 1) % p, previous = (r + p - 1) % p;
  for (auto dtype : kAllDtypes) {
    const torch::Tensor forward = rank_input(r, dtype), backward = encoded(r, p, dtype);
    auto ahead = world.start_send_recv(forward, next, previous);
    auto behind = world.start_send_recv(backward, previous, next);
    EXPECT_TRUE(torch::equal(behind->wait(), encoded(next, p, dtype))) << c10::toString(dtype) << " on rank " << r;
    EXPECT_TRUE(torch::equal(ahead->wait(), rank_input(previous, dtype))) << c10::toString(dtype) << " on rank " << r;
  }
  const std::string bad = "to " + std::to_string(p) + " and from 0 must be ranks of a group of " + std::to_string(p);
  EXPECT_NE(error_of([&] { world.start_send_recv(rank_input(r, torch::kFloat), p, 0); }).find(bad), std::string::npos);
}

TEST_F(Mpi, BadTensorsAreRefusedWithTheNumbers) {
  torch::Tensor x = torch::zeros({p * 2, 3});
  EXPECT_NE(error_of([&] { world.all_to_all(x.t()); }).find("is not contiguous"), std::string::npos);
  if (p > 1) {
    const std::string expected =
        std::to_string(p * 2 + 1) + ", 3] must be divisible by the group size " + std::to_string(p);
    EXPECT_NE(error_of([&] { world.all_to_all(torch::zeros({p * 2 + 1, 3})); }).find(expected),
              std::string::npos);
  }
  torch::Tensor bytes = torch::zeros({4}, torch::kByte), bools = torch::zeros({4}, torch::kBool);
  EXPECT_NE(error_of([&] { world.all_reduce_sum(bytes); }).find("uint8 would wrap"),
            std::string::npos);
  EXPECT_NE(error_of([&] { world.broadcast(bools, 0); }).find("dtype Bool is not supported"),
            std::string::npos);
  const std::string bad_root = std::to_string(p) + " outside a group of " + std::to_string(p);
  EXPECT_NE(error_of([&] { world.broadcast(x, p); }).find(bad_root), std::string::npos);
}

}  // namespace

// SP invariance — the trainer's most important property, under mpiexec -n 2/4:
// for the same weights and batch, the loss and every parameter gradient at SP=P (and at SP=2 × DP=2) equal
// those of SP=1 on one rank, ≤ 1e-5 relative. The SP=1 reference runs on every rank through a real
// MPI_COMM_SELF communicator, with the same code path (train/step.hpp) and the same seeded init.
//
// Data: sequences of S = 16·P tokens whose document boundaries fall inside rank slices, exactly on a slice
// edge and across slices, with padding, and one sequence so short that the last ranks hold no valid label.
// Models: MHA, GQA with kv % P == 0, KV heads replicated (P % kv == 0, down to one KV head), Qwen3 q/k norm.
#include "spmd_fixtures.hpp"
#include "train/grad_sync.hpp"

using namespace ulysses;
using namespace ulysses::testing_spmd;

namespace {

struct Variant {
  std::string type;
  int heads, kv;
};

class SpInvariance : public ::testing::TestWithParam<Variant> {};

TEST_P(SpInvariance, LossAndGradientsEqualSpOne) {
  const Variant v = GetParam();
  const int P = world_size();
  const std::int64_t S = 16 * P;
  const fs::path dir = shared_dir(fmt::format("{}{}{}-{}", v.type, v.heads, v.kv, P));
  write_dataset(dir, S, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, v.type, v.heads, v.kv));

  dist::ProcessGroups groups(RankLayout(P, P));
  comm::MpiCommunicator sp(groups.sp()), world(groups.world()), self(MPI_COMM_SELF);
  for (std::int64_t seq = 0; seq < 4; ++seq) {   // every sequence shape of metas_for
    data::LoaderOptions par{SequenceParallel(groups.layout(), groups.rank(), &sp), 1, 0, 1, 1, 5, kVocab, "train"};
    data::LoaderOptions ref{SequenceParallel(), 1, 0, 1, 1, 5, kVocab, "train"};
    Result got = gradients(cfg, world, dir, par, seq);
    Result want = gradients(cfg, self, dir, ref, seq);
    expect_same(got, want, fmt::format("{} H={} Hkv={} P={} step {}", v.type, v.heads, v.kv, P, seq));
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, SpInvariance,
                         ::testing::Values(Variant{"llama", 4, 4},     // MHA
                                           Variant{"llama", 8, 4},     // GQA, kv % P == 0
                                           Variant{"llama", 4, 2},     // GQA, P % kv == 0 at P = 4
                                           Variant{"llama", 4, 1},     // MQA: one KV head replicated to P
                                           Variant{"qwen3", 4, 2}),    // per-head q/k RMSNorm
                         [](const auto& info) {
                           return fmt::format("{}_h{}_kv{}", info.param.type, info.param.heads, info.param.kv);
                         });

// World 4 as SP=2 × DP=2 equals SP=1 × DP=1 with gradient accumulation over the same sequences.
TEST(SpTimesDp, EqualsGradAccumOnOneRank) {
  if (world_size() != 4) GTEST_SKIP() << "needs exactly 4 ranks (SP=2 × DP=2); this run has " << world_size();
  const std::int64_t S = 32;
  const fs::path dir = shared_dir("spdp");
  write_dataset(dir, S, 2);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2));
  dist::ProcessGroups groups(RankLayout(4, 2));
  comm::MpiCommunicator sp(groups.sp()), world(groups.world()), self(MPI_COMM_SELF);
  const auto& l = groups.layout();
  for (std::int64_t step = 0; step < 2; ++step) {
    data::LoaderOptions par{SequenceParallel(l, groups.rank(), &sp), 2, l.dp_rank(groups.rank()), 1, 1, 9, kVocab, "train"};
    data::LoaderOptions ref{SequenceParallel(), 1, 0, 1, 2, 9, kVocab, "train"};
    Result got = gradients(cfg, world, dir, par, step);
    Result want = gradients(cfg, self, dir, ref, step);
    expect_same(got, want, fmt::format("SP=2 x DP=2 step {}", step));
  }
}

// Gradients travel in buckets (here of 5 elements: some parameters share one, the 12-element one goes
// alone): every gradient must still be the sum over ranks divided by the count.
TEST(GradSync, BucketedReductionIsTheSumOverRanks) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int P = world.size(), r = world.rank();
  std::vector<torch::Tensor> params;
  for (std::int64_t n : {2, 3, 12, 1, 4}) params.push_back(torch::zeros({n}).requires_grad_(true));
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i].mutable_grad() = torch::arange(params[i].numel(), torch::kFloat) + 100.0 * static_cast<double>(i) + r;
  train::reduce_gradients(params, world, 4.0, c10::kFloat, 5);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto n = params[i].numel();
    const torch::Tensor want = (P * (torch::arange(n, torch::kFloat) + 100.0 * static_cast<double>(i)) + P * (P - 1) / 2.0) / 4.0;
    EXPECT_TRUE(torch::allclose(params[i].grad(), want)) << "parameter " << i << ": " << params[i].grad();
  }
}

// Both bf16 precisions — the bf16 model (bf16 copies of the fp32 masters, bf16 activations) and amp-bf16 (autocast
// over fp32 weights): SP=P equals SP=1 to bf16 rounding (2e-2: a few bf16 units, 2^-8 = 3.9e-3, where the all-to-all
// regroups the attention's sums), and both track the fp32 gradient. Needs ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on CPUs
// whose AMX the kernel does not enable (the test's environment sets it; see docs/training.md).
TEST(Bf16, SpEqualsSpOneAndTracksFp32) {
  const int P = world_size();
  const std::int64_t S = 16 * P;
  const fs::path dir = shared_dir(fmt::format("bf16-{}", P));
  write_dataset(dir, S, P);
  dist::ProcessGroups groups(RankLayout(P, P));
  comm::MpiCommunicator sp(groups.sp()), world(groups.world()), self(MPI_COMM_SELF);
  data::LoaderOptions par{SequenceParallel(groups.layout(), groups.rank(), &sp), 1, 0, 1, 1, 5, kVocab, "train"};
  data::LoaderOptions ref{SequenceParallel(), 1, 0, 1, 1, 5, kVocab, "train"};
  struct Case {
    model::Precision precision;
    Variant model;
  };
  // the bf16 model with GQA, one KV head replicated to P and Qwen3's q/k norms; amp-bf16 as it always was
  for (const Case& c : {Case{model::Precision::kBf16, {"llama", 8, 4}}, Case{model::Precision::kBf16, {"llama", 4, 1}},
                        Case{model::Precision::kBf16, {"qwen3", 4, 2}}, Case{model::Precision::kAmpBf16, {"llama", 8, 4}}})
    for (std::int64_t seq : {0, 1}) {
      const auto bf16 = c.precision;
      const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, c.model.type, c.model.heads, c.model.kv));
      const std::string what = fmt::format("{} {} H={} Hkv={}, sequence {}",
                                           bf16 == model::Precision::kBf16 ? "bf16" : "amp-bf16", c.model.type,
                                           c.model.heads, c.model.kv, seq);
      Result got = gradients(cfg, world, dir, par, seq, model::ModelOptions().precision(bf16));
      Result want = gradients(cfg, self, dir, ref, seq, model::ModelOptions().precision(bf16));
      Result fp32 = gradients(cfg, self, dir, ref, seq);
      expect_same(got, want, fmt::format("{}: SP={} vs SP=1", what, P), 2e-2);
      expect_same(want, fp32, fmt::format("{}: vs fp32", what), 5e-2);
      EXPECT_NE(want.loss, fp32.loss) << what << ": gave the fp32 loss bit for bit";
    }
}

}  // namespace

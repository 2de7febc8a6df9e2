// SP invariance — the trainer's most important property, under mpiexec -n 2/4:
// for the same weights and batch, the loss and every parameter gradient at SP=P (and at SP=2 × DP=2) equal
// those of SP=1 on one rank, ≤ 1e-5 relative. The SP=1 reference runs on every rank through a real
// MPI_COMM_SELF communicator, with the same code path (train/step.hpp) and the same seeded init.
//
// Data: sequences of S = 16·P tokens whose document boundaries fall inside rank slices, exactly on a slice
// edge and across slices, with padding, and one sequence so short that the last ranks hold no valid label.
// Models: MHA, GQA with kv % P == 0, KV heads replicated (P % kv == 0, down to one KV head), Qwen3 q/k norm.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "dist/process_groups.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"
#include "arch/model_config.hpp"
#include "core/sequence_parallel.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"
#include "train/grad_sync.hpp"
#include "train/step.hpp"

namespace fs = std::filesystem;
using namespace ulysses;

namespace {

constexpr std::int64_t kVocab = 64;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Rank 0's pid, so concurrent runs of this test use different scratch folders.
int getpid_of_rank0() {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return pid;
}

// Runs fn on rank 0 only; every rank then learns whether it succeeded, so a failure on rank 0 stops
// all ranks together instead of leaving them in a collective.
void on_rank0(const std::function<void()>& fn) {
  std::string error;
  if (world_rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  int failed = error.empty() ? 0 : 1;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed) throw std::runtime_error("setup failed on rank 0: " + (error.empty() ? "see rank 0" : error));
}

// A scratch directory shared by all ranks (same machine), made by rank 0.
fs::path shared_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("uly-spinv-{}-{}", name, getpid_of_rank0());
  on_rank0([&] {
    fs::remove_all(dir);
    fs::create_directories(dir);
  });
  return dir;
}

// Sequence metas with boundaries inside, on, and across the P slices of length L = S / P.
std::vector<shard::SequenceMeta> metas_for(std::int64_t S, std::int64_t P) {
  const auto L = static_cast<std::int32_t>(S / P);
  const auto s = static_cast<std::int32_t>(S);
  return {
      {s - 3, {0, 5, L, L + 3, s - L / 2}},                  // inside, on an edge, inside; padding at the end
      {s, {0, L / 2, s - 1}},                                // one document across all slices; last is 1 token
      {L + 2, {0}},                                          // short: slices 2.. hold only padding
      {s, {0}},                                              // one full document
  };
}

void write_dataset(const fs::path& dir, std::int64_t S, std::int64_t P) {
  on_rank0([&] {
    auto metas = metas_for(S, P);
    std::mt19937 rng(123);
    std::vector<std::int32_t> ids(metas.size() * static_cast<std::size_t>(S));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int32_t>(rng() % kVocab);
    std::vector<std::uint8_t> mask(ids.size(), 1);
    shard::ShardParams params{S, P, 1, 0, false};
    shard::ShardWriter w(dir / "shard-00000.h5", params, static_cast<std::int64_t>(metas.size()));
    w.append(ids, {}, metas);
    w.close();
    shard::Manifest m;
    m.seq_len = S;
    m.sp = P;
    m.alignment = 1;
    m.vocab_size = kVocab;
    m.max_token_id = kVocab - 1;
    m.policy = "test";
    m.shards.push_back({"shard-00000.h5", "train", static_cast<std::int64_t>(metas.size()), 0, ""});
    m.stats = nlohmann::json::object();
    shard::write_manifest(m, dir / "manifest.json");
  });
}

fs::path write_config(const fs::path& dir, const std::string& type, int heads, int kv) {
  const fs::path path = dir / fmt::format("{}-{}-{}.json", type, heads, kv);
  on_rank0([&] {
    nlohmann::json c = {{"architectures", {type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
                        {"model_type", type}, {"vocab_size", kVocab}, {"hidden_size", 32},
                        {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", heads},
                        {"num_key_value_heads", kv}, {"head_dim", 8}, {"hidden_act", "silu"},
                        {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                        {"tie_word_embeddings", false}, {"initializer_range", 0.2}};
    std::ofstream(path) << c.dump(2);
  });
  return path;
}

struct Result {
  double loss = 0;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

// The model runs over lo.sp, the same SP handle as the loader's.
Result gradients(const arch::ModelConfig& cfg, comm::Communicator& world, const fs::path& data,
                 data::LoaderOptions lo, std::int64_t steps_skipped,
                 model::Precision precision = model::Precision::kFp32) {
  model::CausalLm m(cfg, lo.sp, model::ModelOptions().precision(precision));
  model::init_weights(m, 7);
  std::vector<torch::Tensor> params;
  for (auto& p : m->parameters()) params.push_back(p);
  data::DataLoader loader(data, lo);
  for (std::int64_t i = 0; i < steps_skipped; ++i) loader.advance_step();
  Result r;
  r.loss = train::compute_gradients(m, loader, lo.grad_accum, params, world, torch::kCPU).mean();
  for (const auto& item : m->named_parameters()) r.grads.emplace_back(item.key(), item.value().grad().clone());
  return r;
}

void expect_same(const Result& got, const Result& ref, const std::string& what, double tol = 1e-5) {
  EXPECT_NEAR(got.loss, ref.loss, tol * std::abs(ref.loss)) << what;
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (std::size_t i = 0; i < ref.grads.size(); ++i) {
    const auto& [name, g] = got.grads[i];
    const auto& r = ref.grads[i].second;
    const double scale = std::max(r.norm().item<double>(), 1e-12);
    const double rel = (g - r).norm().item<double>() / scale;
    EXPECT_LE(rel, tol) << what << ": " << name << " relative difference " << rel;
    EXPECT_GT(scale, 1e-9) << what << ": " << name << " has no gradient at all";
    EXPECT_EQ(g.scalar_type(), torch::kFloat) << what << ": " << name << " gradient is not float32 (master weights)";
  }
}

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
  train::reduce_gradients(params, world, 4.0, 5);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto n = params[i].numel();
    const torch::Tensor want = (P * (torch::arange(n, torch::kFloat) + 100.0 * static_cast<double>(i)) + P * (P - 1) / 2.0) / 4.0;
    EXPECT_TRUE(torch::allclose(params[i].grad(), want)) << "parameter " << i << ": " << params[i].grad();
  }
}

// bf16 mixed precision (autocast forward, fp32 master weights): SP=P equals SP=1 to bf16 rounding, and both
// track the fp32 gradient. Needs ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on CPUs whose AMX the kernel does not
// enable (the test's environment sets it; see docs/training.md).
TEST(Bf16, SpEqualsSpOneAndTracksFp32) {
  const int P = world_size();
  const std::int64_t S = 16 * P;
  const fs::path dir = shared_dir(fmt::format("bf16-{}", P));
  write_dataset(dir, S, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 8, 4));
  dist::ProcessGroups groups(RankLayout(P, P));
  comm::MpiCommunicator sp(groups.sp()), world(groups.world()), self(MPI_COMM_SELF);
  data::LoaderOptions par{SequenceParallel(groups.layout(), groups.rank(), &sp), 1, 0, 1, 1, 5, kVocab, "train"};
  data::LoaderOptions ref{SequenceParallel(), 1, 0, 1, 1, 5, kVocab, "train"};
  for (std::int64_t seq : {0, 1}) {
    const auto bf16 = model::Precision::kBf16;
    Result got = gradients(cfg, world, dir, par, seq, bf16);
    Result want = gradients(cfg, self, dir, ref, seq, bf16);
    Result fp32 = gradients(cfg, self, dir, ref, seq);
    expect_same(got, want, fmt::format("bf16 SP={} vs SP=1, sequence {}", P, seq), 2e-2);
    expect_same(want, fp32, fmt::format("bf16 vs fp32, sequence {}", seq), 5e-2);
    EXPECT_NE(want.loss, fp32.loss) << "bf16 gave the fp32 loss bit for bit: autocast did not take effect";
  }
}

}  // namespace

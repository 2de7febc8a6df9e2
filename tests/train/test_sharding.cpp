// Sharded model states (ZeRO-3 / FSDP) under mpiexec -n 2/3/4: the loss and every gradient (gathered whole)
// of a model whose weights, gradients and AdamW state are split over the ranks equal those of the
// replicated model at SP=1 on one rank (≤ 1e-5 relative in fp32), at SP=P sharded over every rank, at
// SP=2 × DP=2 sharded over every rank and inside each SP group (hybrid), and over 3 ranks (shards padded);
// with the memory features on, tied embeddings, bf16, the optimizer offloaded to host memory (a separate
// host buffer on CPU, the same code path); 20 optimizer steps track the replicated run; and the sharded
// AdamW update, offloaded or not, equals the replicated one bit for bit; offloading the parameters too changes
// nothing, bit for bit, and leaves their copies in host memory only. Prefetching the next unit's gather
// changes nothing, bit for bit, and never serves a gather issued before the shards changed. The trainer's rank
// groups answer each purpose with RankLayout's ranks.
#include "spmd_fixtures.hpp"

#include <chrono>
#include <functional>
#include <numeric>

#include <ATen/ops/allclose.h>

#include "train/model_states.hpp"
#include "train/rank_groups.hpp"

using namespace ulysses;
using namespace ulysses::testing_spmd;

namespace {

// The replicated reference: SP=1 on this rank alone, accumulating the micro-batches the layout spreads.
data::LoaderOptions reference(std::int64_t grad_accum, std::uint64_t seed) {
  return {SequenceParallel(), 1, 0, 1, grad_accum, seed, kVocab, "train"};
}

struct Layout {
  dist::ProcessGroups groups;
  comm::MpiCommunicator sp, dp, world, self;
  explicit Layout(int sp_degree)
      : groups(RankLayout(world_size(), sp_degree)), sp(groups.sp()), dp(groups.dp()), world(groups.world()),
        self(MPI_COMM_SELF) {}
  data::LoaderOptions loader(std::uint64_t seed) {
    const auto& l = groups.layout();
    return {SequenceParallel(l, groups.rank(), &sp), l.dp(), l.dp_rank(groups.rank()), 1, 1, seed, kVocab, "train"};
  }
  model::StatePlacement full(bool offload = false) { return {&world, nullptr, torch::kCPU, offload}; }
  model::StatePlacement hybrid(bool offload = false) { return {&sp, &dp, torch::kCPU, offload}; }
};

// `steps` optimizer steps (AdamW, clipping at 1, lr 1e-2) of `m` from seeded weights: the losses, and every weight
// after them (whole). after_step(i) runs after step i (from 0).
struct Trained {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> weights;
};
Trained train_steps(model::CausalLm& m, comm::Communicator& group, const fs::path& dir, const data::LoaderOptions& lo,
                    int steps, const std::function<void(int)>& after_step = {}) {
  model::init_weights(m, 11);
  train::ModelStates states(m, group, {0.9, 0.95, 1e-8, 0.1});
  data::DataLoader loader(dir, lo);
  Trained t;
  for (int step = 0; step < steps; ++step) {
    t.losses.push_back(train::compute_gradients(m, loader, lo.grad_accum, states, torch::kCPU).mean());
    states.clip(1.0);
    states.step(1e-2);
    loader.advance_step();
    if (after_step) after_step(step);
  }
  states.for_each_whole(train::ModelStates::Part::kWeights,
                        [&](const std::string& n, const torch::Tensor& w) { t.weights[n] = w.clone(); });
  return t;
}

// Every memory feature of the model at the tiny model's sizes: checkpointing, the first layer's input offloaded, MLP
// tiles of 5 tokens, loss chunks of 3.
model::ModelOptions every_memory_feature(model::ModelOptions o = {}) {
  return o.activation_checkpointing(true).offload_checkpoints(1).mlp_tile_tokens(5).logits_chunk_tokens(3);
}

// One sharded run: tied embeddings or not, the model's options, the optimizer offloaded, the SP degree, hybrid shards.
struct Variant {
  std::string name;
  bool tied;
  model::ModelOptions options;
  bool offload;
  int sp;
  bool hybrid = false;
};

struct Case {
  std::string name;
  bool tied;
  model::ModelOptions options;
  bool offload = false;
};

class ShardedGradients : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedGradients, FullShardAtSpPEqualsReplicatedSpOne) {
  const Case c = GetParam();
  const int P = world_size();
  if (P == 3) GTEST_SKIP() << "4 heads do not split over 3 SP ranks (the padded world of 3 is Padding.*)";
  const std::int64_t S = 16 * P;
  const fs::path dir = shared_dir(fmt::format("shard-{}-{}", c.name, P));
  write_dataset(dir, S, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 1, c.tied));
  Layout l(P);
  for (std::int64_t seq : {0, 1, 2}) {
    Result got = gradients(cfg, l.world, dir, l.loader(5), seq, c.options, l.full(c.offload));
    Result want = gradients(cfg, l.self, dir, reference(1, 5), seq);
    expect_same(got, want, fmt::format("{}: full_shard SP={} vs replicated SP=1, sequence {}", c.name, P, seq));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, ShardedGradients,
    ::testing::Values(Case{"plain", false, model::ModelOptions()},
                      Case{"tied", true, model::ModelOptions()},
                      Case{"memory_features", true,   // every memory feature on, a tile that does not divide S/P
                           model::ModelOptions().activation_checkpointing(true).offload_checkpoints(2).mlp_tile_tokens(5).logits_chunk_tokens(3)},
                      Case{"offload_optimizer", false, model::ModelOptions(), true}),
    [](const auto& info) { return info.param.name; });

// Attention in head groups over sharded units (each group's q/k/v rows are views of the gathered layer), with every
// memory feature and prefetch on, full_shard at SP=P: equals the replicated model with all heads at once at SP=1.
TEST(ShardedHeadGroups, EqualReplicatedAllHeadsAtOnce) {
  const int P = world_size();
  if (P == 3) GTEST_SKIP() << "8 heads do not split over 3 SP ranks";
  const fs::path dir = shared_dir(fmt::format("shard-head-groups-{}", P));
  write_dataset(dir, 16 * P, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 8, 4));
  Layout l(P);
  const auto grouped = every_memory_feature().prefetch(true).attention_head_groups(2);
  for (std::int64_t seq : {0, 1})
    expect_same(gradients(cfg, l.world, dir, l.loader(5), seq, grouped, l.full()),
                gradients(cfg, l.self, dir, reference(1, 5), seq), fmt::format("2 head groups, sequence {}", seq));
}

// World 4 as SP=2 × DP=2, sharded over every rank and inside each SP group (HSDP), against one rank
// accumulating the same sequences.
TEST(ShardedSpTimesDp, FullAndHybridEqualReplicated) {
  if (world_size() != 4) GTEST_SKIP() << "needs exactly 4 ranks (SP=2 × DP=2); this run has " << world_size();
  const fs::path dir = shared_dir("shard-spdp");
  write_dataset(dir, 32, 2);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2));
  Layout l(2);
  for (std::int64_t step = 0; step < 2; ++step) {
    Result want = gradients(cfg, l.self, dir, reference(2, 9), step);
    expect_same(gradients(cfg, l.world, dir, l.loader(9), step, {}, l.full()), want,
                fmt::format("full_shard SP=2 x DP=2 step {}", step));
    expect_same(gradients(cfg, l.world, dir, l.loader(9), step, {}, l.hybrid()), want,
                fmt::format("hybrid_shard SP=2 x DP=2 step {}", step));
    expect_same(gradients(cfg, l.world, dir, l.loader(9), step, {}, l.hybrid(/*offload=*/true)), want,
                fmt::format("hybrid_shard, optimizer offloaded, SP=2 x DP=2 step {}", step));
  }
}

// Three ranks (DP=3): no parameter count divides by 3 here, so every group's last shard is padded.
TEST(Padding, WorldOfThreeEqualsReplicated) {
  if (world_size() != 3) GTEST_SKIP() << "needs exactly 3 ranks; this run has " << world_size();
  const fs::path dir = shared_dir("shard-three");
  write_dataset(dir, 48, 3);   // packed for SP=3 (its document edges), run at SP=1 × DP=3
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2));
  Layout l(1);
  for (std::int64_t step = 0; step < 1; ++step)
    expect_same(gradients(cfg, l.world, dir, l.loader(3), step, {}, l.full()),
                gradients(cfg, l.self, dir, reference(3, 3), step), fmt::format("full_shard over 3 ranks, step {}", step));
}

// bf16 autocast: sharded (matmul weights gathered in bf16) equals replicated bf16 to bf16 rounding.
TEST(ShardedBf16, EqualsReplicatedBf16) {
  const int P = world_size();
  if (P == 3) GTEST_SKIP() << "4 heads do not split over 3 SP ranks";
  const fs::path dir = shared_dir(fmt::format("shard-bf16-{}", P));
  write_dataset(dir, 16 * P, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2));
  Layout l(P);
  const auto bf16 = model::ModelOptions().precision(model::Precision::kAmpBf16);
  for (std::int64_t seq : {0, 1})
    expect_same(gradients(cfg, l.world, dir, l.loader(5), seq, bf16, l.full()),
                gradients(cfg, l.self, dir, reference(1, 5), seq, bf16), fmt::format("bf16 sequence {}", seq), 2e-2);
}

// The bf16 model (--precision bf16: every gathered weight bf16, norms and table included; bf16 activations), sharded
// with the memory features on, the optimizer offloaded, gradients reduced in bf16 or hybrid, equals the replicated
// bf16 model at SP=1 (its fp32 masters beside bf16 copies) to bf16 rounding: the sums over ranks and chunks round in
// other places, a few bf16 units (2^-8 = 3.9e-3) at most; observed ≤ 9e-3.
TEST(ShardedBf16, TheBf16ModelEqualsItsReplicatedRunWithEveryFeature) {
  const int P = world_size();
  if (P == 3) GTEST_SKIP() << "4 heads do not split over 3 SP ranks";
  const fs::path dir = shared_dir(fmt::format("shard-true-bf16-{}", P));
  write_dataset(dir, 16 * P, P);
  const auto bf16 = model::ModelOptions().precision(model::Precision::kBf16);
  std::vector<Variant> variants{{"tied, every memory feature", true, every_memory_feature(bf16).prefetch(true), false, P},
                                {"optimizer offloaded, reduced in bf16", false,
                                 model::ModelOptions(bf16).reduce_dtype(torch::kBFloat16), true, P}};
  if (P == 4) variants.push_back({"hybrid SP=2 x DP=2", false, bf16, false, 2, true});
  for (const Variant& v : variants) {
    const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2, v.tied));
    Layout l(v.sp);
    const std::int64_t dp = P / v.sp;
    for (std::int64_t seq : {0, 1}) {
      const Result sharded = gradients(cfg, l.world, dir, l.loader(5), seq, v.options,
                                       v.hybrid ? l.hybrid(v.offload) : l.full(v.offload));
      const Result replicated = gradients(cfg, l.self, dir, reference(dp, 5), seq, bf16);
      expect_same(sharded, replicated, fmt::format("bf16, {}, sequence {}", v.name, seq), 2e-2);
      EXPECT_NE(replicated.loss, gradients(cfg, l.self, dir, reference(dp, 5), seq).loss)
          << "the bf16 model gave the fp32 loss bit for bit";
    }
  }
}

// Prefetch (the next unit's all-gather issued ahead; on a CPU at once, through the same cache): the loss and
// every gradient equal the same sharded run's without it bit for bit — tied or not, every memory feature on,
// the optimizer offloaded, hybrid at SP=2 × DP=2 — every unit but the embeddings is taken ahead in forward and
// in backward (2 × layers + the head's units per micro-batch), and nothing is left issued once the gradients
// are finished.
TEST(Prefetch, EqualsNoPrefetchBitForBitAndTakesEveryUnitButTheEmbeddingsAhead) {
  const int P = world_size();
  if (P == 3) GTEST_SKIP() << "4 heads do not split over 3 SP ranks";
  const fs::path dir = shared_dir(fmt::format("shard-prefetch-{}", P));
  write_dataset(dir, 16 * P, P);
  const auto features = every_memory_feature();
  std::vector<Variant> variants{{"plain", false, {}, false, P, false},
                                {"tied, every memory feature", true, features, false, P, false},
                                {"optimizer offloaded", false, {}, true, P, false}};
  if (P == 4)
    variants.push_back({"hybrid SP=2 x DP=2, gathers on a communicator of their own", false, {}, false, 2, true});
  for (const Variant& v : variants) {
    const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 1, v.tied));
    Layout l(v.sp);
    comm::MpiCommunicator gathers(l.groups.sp());   // hybrid: as the trainer gives NCCL prefetch its own
    auto run = [&](bool prefetch) {
      const data::LoaderOptions lo = l.loader(5);
      model::StatePlacement sharding = v.hybrid ? l.hybrid(v.offload) : l.full(v.offload);
      if (v.hybrid && prefetch) sharding.gather_group = &gathers;
      model::CausalLm m(cfg, lo.sp, model::ModelOptions(v.options).prefetch(prefetch), sharding);
      model::init_weights(m, 7);
      train::ModelStates states(m, l.world);
      data::DataLoader loader(dir, lo);
      Result r;
      r.loss = train::compute_gradients(m, loader, lo.grad_accum, states, torch::kCPU).mean();
      for (auto& [name, g] : states.whole_gradients()) r.grads[name] = g;
      const auto& ss = *m->sharded_states();
      EXPECT_EQ(ss.prefetched(), 0) << v.name << ": a gather issued ahead was never taken";
      const std::int64_t head_units = v.tied ? 2 : 1;
      EXPECT_EQ(ss.taken_ahead(), prefetch ? 2 * cfg.num_layers + head_units : 0) << v.name;
      return r;
    };
    expect_same(run(true), run(false), v.name + ": prefetch vs none", 0);
  }
}

// A gather issued ahead and not taken is dropped when the gradients are finished: the optimizer step that
// follows changes the shards, and the next gather sends the new values, not the prefetched old ones.
TEST(Prefetch, AGatherNotTakenIsDroppedBeforeTheShardsChange) {
  const int P = world_size();
  const fs::path dir = shared_dir(fmt::format("shard-prefetch-drop-{}", P));
  write_dataset(dir, 16 * P, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2));
  Layout l(1);
  for (bool offload : {false, true}) {
    model::CausalLm m(cfg, SequenceParallel(), model::ModelOptions().prefetch(true), l.full(offload));
    model::init_weights(m, 7);
    auto& ss = *m->sharded_states();
    const int unit = ss.unit("model.layers.1");
    const torch::Tensor before = ss.gather(unit)[0].clone();
    ss.prefetch({unit});
    ASSERT_EQ(ss.prefetched(), 1);
    ss.finish_gradients(1);
    EXPECT_EQ(ss.prefetched(), 0) << "offload " << offload;
    {
      torch::NoGradGuard no_grad;
      for (const auto& g : ss.groups()) g.master.detach().add_(1);
    }
    ss.refresh();
    const torch::Tensor after = ss.gather(unit)[0];
    EXPECT_TRUE(torch::equal(after, before + 1)) << "offload " << offload << ": a stale prefetch was served";
    EXPECT_EQ(ss.taken_ahead(), 0);
  }
}

// 20 optimizer steps (clipping, AdamW, the LR) sharded over every rank track the replicated run.
TEST(ShardedTraining, TwentyStepsTrackReplicated) {
  const int P = world_size();
  if (P == 3) GTEST_SKIP() << "4 heads do not split over 3 SP ranks";
  const fs::path dir = shared_dir(fmt::format("shard-steps-{}", P));
  write_dataset(dir, 16 * P, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2, /*tied=*/true));
  Layout l(P);
  auto run = [&](comm::Communicator& world, data::LoaderOptions lo, const model::StatePlacement& sharding, bool prefetch) {
    model::CausalLm m(cfg, lo.sp, model::ModelOptions().prefetch(prefetch), sharding);
    return train_steps(m, world, dir, lo, 20);
  };
  const auto [want_losses, want] = run(l.self, reference(1, 5), {}, false);
  for (const auto& [offload, prefetch] : {std::pair{false, false}, {true, false}, {true, true}}) {
    const auto [got_losses, got] = run(l.world, l.loader(5), l.full(offload), prefetch);
    for (int i = 0; i < 20; ++i)
      EXPECT_NEAR(got_losses[i], want_losses[i], 1e-5 * std::abs(want_losses[i]))
          << "offload " << offload << " prefetch " << prefetch << " step " << i + 1;
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      const double rel = (got.at(name) - w).norm().item<double>() / w.norm().item<double>();
      EXPECT_LE(rel, 1e-5) << name << " after 20 steps, offload " << offload << " prefetch " << prefetch;
    }
  }
  EXPECT_GT(std::abs(want_losses.front() - want_losses.back()), 1e-3) << "the run did not train";
}

// Parameter offload (--offload-params): the weights' gather-dtype copies are host buffers of exactly their bytes, so
// the device keeps none of them between units, and three optimizer steps equal optimizer offload alone bit for bit —
// losses and every weight — in fp32 and bf16, with prefetch and without, sharded over every rank (at 3 ranks every
// shard padded) and at one rank (the copy over goes straight into the gathered buffer).
TEST(OffloadParams, HostCopiesOnlyAndStepsEqualOptimizerOffloadBitForBit) {
  const int P = world_size();
  const fs::path dir = shared_dir(fmt::format("shard-offload-params-{}", P));
  write_dataset(dir, 16 * P, P);
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2, /*tied=*/true));
  Layout l(1);
  auto run = [&](comm::Communicator& group, const data::LoaderOptions& lo, const model::ModelOptions& o, bool params) {
    model::CausalLm m(cfg, lo.sp, o, model::StatePlacement{&group, nullptr, torch::kCPU, true, params});
    const auto& ss = *m->sharded_states();
    std::int64_t copy_bytes = 0;   // every group's [n] copy in its gather dtype
    for (const auto& g : ss.groups())
      copy_bytes += g.shard_numel * static_cast<std::int64_t>(c10::elementSize(g.gather_dtype));
    return train_steps(m, group, dir, lo, 3, [&](int step) {
      EXPECT_EQ(ss.param_host_bytes(), params ? copy_bytes : 0) << "after step " << step + 1;
    });
  };
  for (const model::Precision precision : {model::Precision::kFp32, model::Precision::kBf16})
    for (const bool prefetch : {false, true})
      for (const bool one_rank : {false, true}) {
        const auto o = model::ModelOptions().precision(precision).prefetch(prefetch);
        comm::Communicator& group = one_rank ? static_cast<comm::Communicator&>(l.self) : l.world;
        const data::LoaderOptions lo = one_rank ? reference(P, 5) : l.loader(5);
        const std::string what = fmt::format("{}, prefetch {}, {} rank(s)",
                                             precision == model::Precision::kBf16 ? "bf16" : "fp32", prefetch,
                                             one_rank ? 1 : P);
        const auto [want_losses, want] = run(group, lo, o, false);
        const auto [got_losses, got] = run(group, lo, o, true);
        EXPECT_EQ(got_losses, want_losses) << what;
        EXPECT_NE(want_losses.front(), want_losses.back()) << what << ": the run did not train";
        ASSERT_EQ(got.size(), want.size());
        for (const auto& [name, w] : want) EXPECT_TRUE(torch::equal(got.at(name), w)) << what << ": " << name;
      }
}

// The same gradients in: the sharded AdamW update (over flat shards, decay per group) equals the replicated
// update bit for bit, weights and both moments.
class ShardedAdamW : public ::testing::TestWithParam<bool> {};

TEST_P(ShardedAdamW, UpdateEqualsReplicatedBitForBit) {
  const int P = world_size();
  const fs::path dir = shared_dir(fmt::format("shard-adamw-{}-{}", P, GetParam()));
  const arch::ModelConfig cfg = arch::read_model_config(write_config(dir, "llama", 4, 2));
  comm::MpiCommunicator world(MPI_COMM_WORLD), self(MPI_COMM_SELF);
  model::CausalLm sharded(cfg, SequenceParallel(), model::ModelOptions(),
                          model::StatePlacement{&world, nullptr, torch::kCPU, /*offload_optimizer=*/GetParam()});
  model::CausalLm replicated(cfg);
  model::init_weights(sharded, 3);
  model::init_weights(replicated, 3);
  train::ModelStates a(sharded, world), b(replicated, self);
  using Part = train::ModelStates::Part;
  torch::manual_seed(99);
  for (int step = 1; step <= 3; ++step) {
    for (const auto& w : b.whole_list(Part::kWeights)) {   // one random gradient per parameter, the same on every rank
      const torch::Tensor g = torch::randn(w.shape);
      for (auto& item : replicated->named_parameters())
        if (item.key() == w.name) item.value().mutable_grad() = g.clone();
      auto& states = *sharded->sharded_states();
      for (const auto& grp : states.groups())
        if (!grp.master.grad().defined()) grp.master.mutable_grad() = torch::zeros_like(grp.master);
      states.load(w.name, 0, g, [](const model::ShardedStates::Group& grp) { return grp.master.grad(); });
    }
    a.step(1e-2 * step);
    b.step(1e-2 * step);
  }
  for (Part part : {Part::kWeights, Part::kOptimizer}) {
    std::map<std::string, torch::Tensor> want;
    b.for_each_whole(part, [&](const std::string& n, const torch::Tensor& t) { want[n] = t.clone(); });
    std::size_t seen = 0;
    a.for_each_whole(part, [&](const std::string& n, const torch::Tensor& t) {
      ++seen;
      EXPECT_TRUE(torch::equal(t, want.at(n))) << n << " differs from the replicated update";
    });
    EXPECT_EQ(seen, want.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Offload, ShardedAdamW, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "offloaded" : "on_device"; });

}  // namespace

namespace {

// The global ranks of a group, gathered over it in its rank order.
std::vector<int> members(comm::Communicator& group, int global_rank) {
  const torch::Tensor all = group.all_gather(torch::tensor({global_rank}, torch::kInt));   // [group size]
  return std::vector<int>(all.data_ptr<int>(), all.data_ptr<int>() + all.numel());
}

// RankGroups answers by purpose, for each --sharding mode at SP 2 (SP 1 on 3 ranks): the sequence group is
// RankLayout's SP group, the loss group every rank; the shard group every rank (full) or the SP group (hybrid), the
// replicas the DP group (hybrid only), the gather group the shard group and the head groups' all-to-alls issued ahead
// the Ulysses group (MPI: never one of their own), and no shard group unsharded.
TEST(RankGroups, AnswerByPurposeForEachShardingMode) {
  const int P = world_size();
  const dist::ProcessGroups groups(RankLayout(P, P % 2 == 0 ? 2 : 1));
  const RankLayout& layout = groups.layout();
  const int me = groups.rank();
  std::vector<int> everyone(static_cast<std::size_t>(P));
  std::iota(everyone.begin(), everyone.end(), 0);
  for (const plan::Sharding mode : {plan::Sharding::kNone, plan::Sharding::kFull, plan::Sharding::kHybrid}) {
    const train::RankGroups g(groups, comm::Backend::kMpi, torch::kCPU, std::chrono::seconds(0), mode, true, true);
    const std::string what = fmt::format("sharding {}", static_cast<int>(mode));
    EXPECT_EQ(members(g.sequence(), me), layout.sp_group_of(me)) << what;
    EXPECT_EQ(&g.ulysses_ahead(), &g.ulysses()) << what;
    EXPECT_EQ(members(g.loss(), me), everyone) << what;
    const model::StatePlacement states = g.states_on(torch::kCPU, plan::Features{});
    if (mode == plan::Sharding::kNone) {
      EXPECT_EQ(g.shard(), nullptr) << what;
      EXPECT_FALSE(states.enabled()) << what;
      continue;
    }
    EXPECT_EQ(members(*g.shard(), me), mode == plan::Sharding::kFull ? everyone : layout.sp_group_of(me)) << what;
    EXPECT_EQ(g.gather(), g.shard()) << what;
    EXPECT_EQ(states.shard_group, g.shard()) << what;
    EXPECT_EQ(states.replica_group, g.replicas()) << what;
    if (mode == plan::Sharding::kFull) {
      EXPECT_EQ(g.replicas(), nullptr) << what;
    } else {
      EXPECT_EQ(members(*g.replicas(), me), layout.dp_group_of(me)) << what;
    }
  }
}

}  // namespace

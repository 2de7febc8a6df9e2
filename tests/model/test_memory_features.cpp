// The memory features against the plain path, the model library alone (no Python): tiled logits and loss,
// activation checkpointing (with offload, in bf16), the offloads' host buffers, the bf16 model, the recompute
// primitive, TiledMLP, attention in head groups, and every feature at SP = 4 (ranks as threads) against SP = 1 —
// bit for bit where the arithmetic is the same, else within the stated relative tolerance.
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/autograd/autograd.h>

#include "arch/model_config.hpp"
#include "core/error.hpp"
#include "local_communicators.hpp"
#include "model/causal_lm.hpp"
#include "model/host_buffers.hpp"
#include "model/recompute.hpp"
#include "model/weights.hpp"
#include "model_fixtures.hpp"

namespace ulysses::model {
namespace {

using namespace fixtures;   // NOLINT(google-build-using-namespace): the tests' own fixtures

// ---- tiled logits + loss -----------------------------------------------------------------------

// Tiled logits + loss equal the plain path in fp32: loss and every gradient ≤ 1e-6 relative, whatever the
// chunk (4, 5 and 13 tokens, not dividing the 32 tokens, and all of them), tied or not, with a chunk whose
// labels are all -100 (row 1's first 8 tokens). Chunks of 1 to 3 tokens make the head's matmuls take
// oneDNN's small-M kernels, which round differently: 1.0-1.2e-6 was seen there on one gradient (a
// k_proj bias); real chunks are thousands of tokens.
TEST(TiledLoss, EqualsThePlainPath) {
  for (const bool tied : {false, true}) {
    auto config = tiny_config(2, std::nullopt);
    config.tie_word_embeddings = tied;
    CausalLm plain(config);
    init_weights(plain, 4);
    Batch batch = packed_batch(config.vocab_size);
    batch.labels.select(0, 1).narrow(0, 0, 8).fill_(kIgnoreLabel);
    const LossAndGrads want = loss_and_grads(plain, batch);
    for (const std::int64_t chunk : {4, 5, 13, 32}) {
      CausalLm tiled(config, SequenceParallel(), ModelOptions().logits_chunk_tokens(chunk));
      copy_parameters(plain, tiled);
      const LossAndGrads got = loss_and_grads(tiled, batch);
      expect_matches(got, want, 1e-6, fmt::format("chunk {} tied {}", chunk, tied));
      EXPECT_EQ(got.count, want.count);
    }
  }
}

// Keeping the logits (the parity tests) always takes the plain path, tiled or not: the plain model's
// logits and loss exactly.
TEST(TiledLoss, KeepLogitsStillGivesTheLogits) {
  const auto config = tiny_config(2, std::nullopt);
  CausalLm plain(config);
  init_weights(plain, 3);
  CausalLm tiled(config, SequenceParallel(), ModelOptions().logits_chunk_tokens(4));
  copy_parameters(plain, tiled);
  const Batch b = packed_batch(config.vocab_size);
  const CausalLmOutput want = plain->forward(b.ids, b.positions, b.docs, b.labels, /*keep_logits=*/true);
  const CausalLmOutput got = tiled->forward(b.ids, b.positions, b.docs, b.labels, /*keep_logits=*/true);
  ASSERT_TRUE(got.logits.defined());
  EXPECT_TRUE(got.logits.equal(want.logits));
  EXPECT_TRUE(got.loss_sum.equal(want.loss_sum));
}

// ---- activation checkpointing -------------------------------------------------------------------

// Recomputing each layer in backward repeats the same operations: loss and gradients equal the plain path
// bit for bit (GQA and a sliding window); with tiled logits too, ≤ 1e-6 as tiling alone (12-token chunks:
// 12, 12 and 8 rows, where oneDNN's products give the whole product's rows exactly).
TEST(ActivationCheckpointing, EqualsThePlainPathBitForBit) {
  for (const std::optional<std::int64_t> window : {std::optional<std::int64_t>(), std::optional<std::int64_t>(3)}) {
    const auto config = tiny_config(2, window);
    CausalLm plain(config);
    init_weights(plain, 6);
    const Batch batch = packed_batch(config.vocab_size);
    const LossAndGrads want = loss_and_grads(plain, batch);
    CausalLm recomputed(config, SequenceParallel(), ModelOptions().activation_checkpointing(true));
    copy_parameters(plain, recomputed);
    expect_matches(loss_and_grads(recomputed, batch), want, 0, "checkpointing");
    CausalLm both(config, SequenceParallel(), ModelOptions().activation_checkpointing(true).logits_chunk_tokens(12));
    copy_parameters(plain, both);
    expect_matches(loss_and_grads(both, batch), want, 1e-6, "checkpointing + tiled logits");
  }
}

// Checkpoint offload (forced on CPU: the same code path into a separate host buffer) changes nothing — the
// loss and gradients equal the plain path's bit for bit — and copies layers × B·S/P × hidden × 4 bytes. With
// prefetch, the backward of each layer after an offloaded one issues that input's copy back ahead. An evaluation
// (no grad) copies nothing and leaves the counts of the last training forward and backward.
TEST(ActivationCheckpointing, OffloadIsExactAndCountsItsBytes) {
  const auto config = tiny_config(2, std::nullopt);
  Reference ref = plain_reference(config, 5);
  for (const bool prefetch : {false, true})
    for (const std::int64_t layers : {1, 2}) {
      CausalLm offloaded(config, SequenceParallel(),
                         ModelOptions().activation_checkpointing(true).offload_checkpoints(layers).prefetch(prefetch));
      copy_parameters(ref.model, offloaded);
      const std::string what = fmt::format("{} layers offloaded, prefetch {}", layers, prefetch);
      expect_matches(loss_and_grads(offloaded, ref.batch), ref.result, 0, what);
      EXPECT_EQ(offloaded->model->offloaded_bytes(), layers * 2 * 16 * config.hidden_size * 4) << what;   // fp32
      EXPECT_EQ(offloaded->model->fetched_ahead(), prefetch ? std::min<std::int64_t>(layers, config.num_layers - 1) : 0)
          << what;
      const std::int64_t bytes = offloaded->model->offloaded_bytes();
      {
        torch::NoGradGuard no_grad;
        offloaded->forward(ref.batch.ids, ref.batch.positions, ref.batch.docs, ref.batch.labels);
      }
      EXPECT_EQ(offloaded->model->offloaded_bytes(), bytes) << what << ": an evaluation copied layer inputs";
    }
}

// The offloads' host memory (host_buffers.hpp): a buffer of exactly a tensor's bytes; kept for reuse (as for a
// GPU) it comes back for the same size once the tensor and its views are gone, and stays held; given back (as on
// a CPU), nothing stays held. Tensors outlive the HostBuffers that made them. (Page-locking needs a GPU: these
// are the plain buffers, through the same pool.)
TEST(HostBuffers, ExactBytesReusedWhenKeptGivenBackOtherwise) {
  HostBuffers kept(torch::kCPU, /*keep=*/true);
  auto a = kept.take({3, 5}, torch::kFloat);                     // 60 bytes, not a power of two
  EXPECT_EQ(a.sizes(), (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(a.scalar_type(), torch::kFloat);
  EXPECT_EQ(kept.held_bytes(), 60);
  auto b = kept.take({15}, torch::kFloat);                       // a's size, a is in use: a second buffer
  EXPECT_NE(b.data_ptr(), a.data_ptr());
  EXPECT_EQ(kept.held_bytes(), 120);
  void* const a_memory = a.data_ptr();
  auto view = a.select(0, 1);
  a = torch::Tensor();                                           // its view still holds the buffer
  auto c = kept.take({15}, torch::kFloat);
  EXPECT_NE(c.data_ptr(), a_memory);
  EXPECT_EQ(kept.held_bytes(), 180);
  view = torch::Tensor();
  auto d = kept.take({5, 3}, torch::kFloat);                     // same bytes: a's buffer again
  EXPECT_EQ(d.data_ptr(), a_memory);
  EXPECT_EQ(kept.held_bytes(), 180);
  auto e = kept.take({7}, torch::kDouble);                       // another size: a new one
  EXPECT_EQ(kept.held_bytes(), 236);
  EXPECT_EQ(kept.take({0, 4}, torch::kFloat).numel(), 0);        // nothing to hold
  EXPECT_EQ(kept.held_bytes(), 236);

  HostBuffers given_back(torch::kCPU, /*keep=*/false);
  torch::Tensor outlives;
  {
    HostBuffers scoped(torch::kCPU, /*keep=*/false);
    outlives = scoped.take({4}, torch::kFloat);
  }
  outlives.copy_(torch::arange(4, torch::kFloat));               // its memory is still there
  EXPECT_TRUE(outlives.equal(torch::arange(4, torch::kFloat)));
  auto f = given_back.take({1000}, torch::kFloat);
  EXPECT_EQ(given_back.held_bytes(), 4000);
  f = torch::Tensor();
  EXPECT_EQ(given_back.held_bytes(), 0);
}

// In bf16 the recomputation re-enters the model's autocast for the forward and runs its backward outside it,
// as the plain path does (and torch.utils.checkpoint): loss and gradients bit for bit. (On CPU the backward's
// autocast state does not change these kernels, so this does not tell the two placements apart.) Needs
// ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on CPUs whose AMX the kernel leaves off; meson sets it.
TEST(ActivationCheckpointing, Bf16EqualsThePlainBf16PathBitForBit) {
  const auto config = tiny_config(2, std::nullopt);
  Reference ref = plain_reference(config, 7, ModelOptions().precision(Precision::kAmpBf16));
  CausalLm recomputed(config, SequenceParallel(),
                      ModelOptions().precision(Precision::kAmpBf16).activation_checkpointing(true));
  copy_parameters(ref.model, recomputed);
  expect_matches(loss_and_grads(recomputed, ref.batch), ref.result, 0, "bf16 checkpointing");
}

// The bf16 model (every parameter bf16): checkpointing with offload equals its plain path bit for bit and keeps bf16
// layer inputs (2 bytes an element, half of the fp32 ones above); with --fp32-residual the residual stream and so the
// kept inputs are fp32 (4 bytes) and the loss stays within bf16 rounding of the fp32 model's (2e-2: a few bf16 units).
TEST(Bf16Model, CheckpointOffloadIsExactAndTheFp32ResidualKeepsFp32Inputs) {
  const auto config = tiny_config(2, std::nullopt);
  Reference fp32 = plain_reference(config, 5);
  auto bf16_model = [&](const ModelOptions& options) {
    CausalLm m(config, SequenceParallel(), ModelOptions(options).precision(Precision::kBf16));
    m->to(torch::kBFloat16);
    copy_parameters(fp32.model, m);
    return m;
  };
  CausalLm plain = bf16_model({});
  const LossAndGrads want = loss_and_grads(plain, fp32.batch);
  EXPECT_EQ(want.grads.at("model.norm.weight").scalar_type(), torch::kBFloat16);
  EXPECT_LE(std::abs(want.loss - fp32.result.loss), 2e-2 * std::abs(fp32.result.loss));
  EXPECT_NE(want.loss, fp32.result.loss) << "the bf16 model gave the fp32 loss bit for bit";
  const auto offload = ModelOptions().activation_checkpointing(true).offload_checkpoints(2);
  CausalLm offloaded = bf16_model(offload);
  expect_matches(loss_and_grads(offloaded, fp32.batch), want, 0, "bf16, checkpoint offload");
  const std::int64_t elements = 2 * 2 * 16 * config.hidden_size;   // layers × B × S × hidden
  EXPECT_EQ(offloaded->model->offloaded_bytes(), elements * 2);     // bf16
  CausalLm residual = bf16_model(ModelOptions(offload).fp32_residual(true));
  const LossAndGrads got = loss_and_grads(residual, fp32.batch);
  EXPECT_EQ(residual->model->offloaded_bytes(), elements * 4);      // fp32
  EXPECT_LE(std::abs(got.loss - fp32.result.loss), 2e-2 * std::abs(fp32.result.loss));
  EXPECT_NE(got.loss, want.loss) << "--fp32-residual changed nothing";
}

// ---- the recompute primitive ----------------------------------------------------------------------

// Chunks of rows equal one chunk (float64, ≤ 1e-12 relative: a matmul over fewer rows may block differently): outputs
// concatenated (y = tanh(x W) + b per row) or summed (Σ y·dy), dx and the handed-in weights' gradients. And backward
// runs chunk by chunk: chunk c is recomputed and back-propagated (its dx_c computed) before chunk c+1 is recomputed,
// so one chunk's intermediates are alive at a time.
TEST(Recompute, ChunksOfRowsEqualOneChunkAndBackPropagateOneAtATime) {
  torch::manual_seed(3);
  const torch::Tensor x0 = torch::randn({10, 6}, torch::kFloat64), w0 = torch::randn({6, 5}, torch::kFloat64);
  const torch::Tensor b0 = torch::randn({5}, torch::kFloat64), dy = torch::randn({10, 5}, torch::kFloat64);
  for (const bool sum : {false, true}) {
    std::vector<std::string> events;   // "run c" when f runs with grad, "dx c" when its x_c's gradient is computed
    const ChunkForward f = [&](const Chunk& c, const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
      if (torch::GradMode::is_enabled()) {
        events.push_back(fmt::format("run {}", c.index));
        x.register_hook([&events, c](const torch::Tensor& g) {
          events.push_back(fmt::format("dx {}", c.index));
          return g;
        });
      }
      const torch::Tensor y = at::tanh(at::matmul(x, w[0])) + w[1];   // [rows, 5]
      return torch::autograd::variable_list{sum ? (y * dy.narrow(0, c.first, c.rows)).sum() : y};
    };
    std::vector<std::map<std::string, torch::Tensor>> got;
    for (const std::int64_t rows : {0, 4}) {   // one chunk; chunks of 4, 4 and 2 rows
      const torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      const torch::Tensor b = b0.clone().requires_grad_(true);
      Recompute o;
      o.chunking = {rows, sum};
      const torch::Tensor y = recomputed(f, x, {w, b}, o)[0];
      events.clear();
      (sum ? y : (y * dy).sum()).backward();
      got.push_back({{"y", y.detach()}, {"dx", x.grad()}, {"dw", w.grad()}, {"db", b.grad()}});
      if (rows > 0) {
        EXPECT_EQ(events, (std::vector<std::string>{"run 0", "dx 0", "run 1", "dx 1", "run 2", "dx 2"})) << sum;
      }
    }
    EXPECT_TRUE(at::allclose(got[1]["y"], got[0]["y"], 1e-12, 0)) << sum;
    for (const char* name : {"dx", "dw", "db"})
      EXPECT_TRUE(at::allclose(got[1][name], got[0][name], 1e-12, 0)) << name << sum;
  }
}

// Chunks of columns (head groups' shape): each chunk sees all of x, computes its columns t_c = tanh(x·W_c) and its
// product t_c·V_c (o_proj's share); the products are added, t_c and a second, gradient-free output joined along the
// last dim; dx summed over the chunks. With keep_outputs each chunk's backward is handed its share of what the forward
// returned (c.kept: t's columns and that second output, not the sum) and may use it instead of computing it again:
// here the chunk's forward value of tanh, which a backward built on it must use to get the right gradient. Values and
// gradients equal one chunk (fp64, 1e-12 of the largest element: products of sums cancel in a few), and the kept
// shares equal the forward's outputs. The recomputed product is freed before its backward runs (its value is not
// needed there): expired when the chunk's gradient reaches z.
TEST(Recompute, ChunksOfColumnsHandTheirKeptOutputsToBackward) {
  torch::manual_seed(4);
  const torch::Tensor x0 = torch::randn({2, 7, 6}, torch::kFloat64), w0 = torch::randn({6, 8}, torch::kFloat64);
  const torch::Tensor v0 = torch::randn({8, 5}, torch::kFloat64), dy = torch::randn({2, 7, 5}, torch::kFloat64);
  std::vector<torch::Tensor> kept_seen;   // the kept t shares the backward's chunks were handed
  std::vector<bool> freed;                // per chunk's backward: its recomputed product gone when z's gradient came
  const auto near = [](const torch::Tensor& got, const torch::Tensor& want) {   // 1e-12 of the largest element
    return (got - want).abs().max().item<double>() <= 1e-12 * want.abs().max().item<double>();
  };
  for (const std::int64_t chunks : {1, 4}) {
    const std::int64_t n = 8 / chunks;
    const ChunkForward f = [&](const Chunk& c, const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
      const torch::Tensor z = at::matmul(x, w[0].narrow(1, c.index * n, n));   // [2, 7, n]
      const torch::Tensor v = w[1].narrow(0, c.index * n, n);                   // [n, 5]
      if (c.kept.empty()) {
        const torch::Tensor t = at::tanh(z);
        return torch::autograd::variable_list{at::matmul(t, v), t, z.sum(-1, true)};
      }
      kept_seen.push_back(c.kept[0]);
      // the kept value t with tanh's gradient at z, 1 − t², taken from it: no tanh computed again
      const torch::Tensor t = c.kept[0], slope = 1 - t * t;
      const torch::Tensor product = at::matmul(t + (z - z.detach()) * slope, v);   // [2, 7, 5]
      const c10::weak_intrusive_ptr<c10::StorageImpl> mine(product.storage().getWeakStorageImpl());
      z.register_hook([&freed, mine](const torch::Tensor& g) {
        freed.push_back(mine.expired());
        return g;
      });
      return torch::autograd::variable_list{product, c.kept[0], c.kept[1]};
    };
    const torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const torch::Tensor v = v0.clone().requires_grad_(true);
    Recompute o;
    o.chunking.columns = chunks;
    o.keep_outputs = true;
    kept_seen.clear();
    freed.clear();
    const auto y = recomputed(f, x, {w, v}, o);   // [2, 7, 5], [2, 7, 8], [2, 7, chunks]
    const torch::Tensor want_t = at::tanh(at::matmul(x0, w0));
    EXPECT_TRUE(at::allclose(y[0], at::matmul(want_t, v0), 1e-12, 0)) << chunks;
    EXPECT_TRUE(at::allclose(y[1], want_t, 1e-12, 0)) << chunks;
    EXPECT_EQ(y[2].size(-1), chunks);
    (y[0] * dy).sum().backward();
    const torch::Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
    const torch::Tensor vr = v0.clone().requires_grad_(true);
    (at::matmul(at::tanh(at::matmul(xr, wr)), vr) * dy).sum().backward();
    EXPECT_TRUE(near(x.grad(), xr.grad())) << chunks;
    EXPECT_TRUE(near(w.grad(), wr.grad())) << chunks;
    EXPECT_TRUE(near(v.grad(), vr.grad())) << chunks;
    ASSERT_EQ(static_cast<std::int64_t>(kept_seen.size()), chunks);
    for (std::int64_t c = 0; c < chunks; ++c) EXPECT_TRUE(kept_seen[c].equal(want_t.narrow(-1, c * n, n))) << c;
    EXPECT_EQ(freed, std::vector<bool>(static_cast<std::size_t>(chunks), true)) << chunks;
  }
}

// A first stage issued ahead (Recompute::ahead, head groups' projections and all-to-all): chunk c + 1's first stage is
// issued before f runs chunk c, in forward and in backward (where it records its graph on the chunk's leaf, which f
// shares), and f gets exactly what its chunk's first stage returned. Here the stage computes x·w's columns and f
// applies tanh and its rows of v (the products added): values and gradients equal one chunk (fp64, 1e-12), and the
// calls come in the pipelined order.
TEST(Recompute, FirstStagesIssuedAheadReachTheirChunk) {
  torch::manual_seed(5);
  const torch::Tensor x0 = torch::randn({2, 7, 6}, torch::kFloat64), w0 = torch::randn({6, 8}, torch::kFloat64);
  const torch::Tensor v0 = torch::randn({8, 5}, torch::kFloat64), dy = torch::randn({2, 7, 5}, torch::kFloat64);
  std::vector<std::string> calls;   // "a1": chunk 1's first stage, "f0": chunk 0's f
  const std::int64_t chunks = 3, n = 8 / 4;   // chunk c: columns [2c, 2c + 2) of 6 — the last two columns unused
  const ChunkForward first = [&](const Chunk& c, const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
    calls.push_back(fmt::format("a{}", c.index));
    return torch::autograd::variable_list{at::matmul(x, w[0].narrow(1, c.index * n, n))};   // [2, 7, n]
  };
  const ChunkForward f = [&](const Chunk& c, const torch::Tensor&, const std::vector<torch::Tensor>& w) {
    calls.push_back(fmt::format("f{}", c.index));
    return torch::autograd::variable_list{at::matmul(at::tanh(c.ahead.at(0)), w[1].narrow(0, c.index * n, n))};
  };
  const torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  const torch::Tensor v = v0.clone().requires_grad_(true);
  Recompute o;
  o.chunking.columns = chunks;
  o.ahead = first;
  o.ahead_stream = std::make_shared<SideStream>(x.device());
  const torch::Tensor y = recomputed(f, x, {w, v}, o)[0];   // [2, 7, 5]
  const std::vector<std::string> pipelined{"a0", "a1", "f0", "a2", "f1", "f2"};
  EXPECT_EQ(calls, pipelined) << "forward";
  const torch::Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
  const torch::Tensor vr = v0.clone().requires_grad_(true);
  const torch::Tensor want =
      at::matmul(at::tanh(at::matmul(xr, wr.narrow(1, 0, chunks * n))), vr.narrow(0, 0, chunks * n));
  EXPECT_TRUE(at::allclose(y, want, 1e-12, 0));
  calls.clear();
  (y * dy).sum().backward();
  EXPECT_EQ(calls, pipelined) << "backward";
  (want * dy).sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), xr.grad(), 1e-12, 0));
  EXPECT_TRUE(at::allclose(w.grad(), wr.grad(), 1e-12, 0));
  EXPECT_TRUE(at::allclose(v.grad(), vr.grad(), 1e-12, 0));
  EXPECT_TRUE(w.grad().narrow(1, chunks * n, 8 - chunks * n).eq(0).all().item<bool>());
}

// ---- TiledMLP ------------------------------------------------------------------------------------

// The MLP half of each layer over token tiles equals the plain path: loss bit for bit (each tile computes
// the rows of the whole products exactly), every gradient ≤ 1e-6 relative (weight gradients are sums over
// tiles); 12-token tiles (not dividing the 32 tokens) and 16. With checkpointing and tiled logits together,
// the same bound.
TEST(TiledMlp, EqualsThePlainPath) {
  const auto config = tiny_config(2, std::nullopt);
  Reference ref = plain_reference(config, 12);
  for (const ModelOptions& options : {ModelOptions().mlp_tile_tokens(12), ModelOptions().mlp_tile_tokens(16),
                                      ModelOptions().mlp_tile_tokens(12).activation_checkpointing(true).logits_chunk_tokens(12)}) {
    CausalLm tiled(config, SequenceParallel(), options);
    copy_parameters(ref.model, tiled);
    const LossAndGrads got = loss_and_grads(tiled, ref.batch);
    const std::string what = fmt::format("tile {} checkpointing {} logits chunk {}", options.mlp_tile_tokens(),
                                         options.activation_checkpointing(), options.logits_chunk_tokens());
    if (options.logits_chunk_tokens() == 0) {
      EXPECT_EQ(got.loss, ref.result.loss) << what;   // the same rows, exactly
    }
    expect_matches(got, ref.result, 1e-6, what);
  }
}

// ---- the memory features at SP=4 ------------------------------------------------------------------

// SP=4 with `options` (ranks as threads) equals SP=1 without any: loss and every gradient (summed over the
// ranks) ≤ 1e-5 relative. Checkpointing repeats each layer's all-to-alls on every rank in the same order.
// `from`'s weights at SP=P with `options` (ranks as threads) on the reference batch: the loss and every gradient,
// summed over the ranks.
LossAndGrads run_at_sp(CausalLm& from, const Batch& batch, int P, const ModelOptions& options) {
  testing::ThreadGroup group(P);
  std::vector<CausalLm> ranks;
  for (int r = 0; r < P; ++r) {
    ranks.emplace_back(from->config(), P > 1 ? testing::sp_of(group.rank(r)) : SequenceParallel(), options);
    copy_parameters(from, ranks.back());
  }
  std::vector<double> losses(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      const Batch mine = batch.slice(r, P);
      const CausalLmOutput out = ranks[r]->forward(mine.ids, mine.positions, mine.docs, mine.labels);
      out.loss_sum.backward();
      losses[r] = out.loss_sum.item<double>();
    });
  for (auto& t : threads) t.join();
  LossAndGrads got;   // summed over the ranks
  for (double l : losses) got.loss += l;
  for (const auto& item : from->named_parameters()) {
    got.grads[item.key()] = torch::zeros_like(item.value());
    for (auto& m : ranks) got.grads[item.key()] += m->named_parameters()[item.key()].grad();
  }
  return got;
}

// SP=4 with `options` (ranks as threads) equals SP=1 without any: loss and every gradient (summed over the
// ranks) ≤ 1e-5 relative. Checkpointing repeats each layer's all-to-alls on every rank in the same order.
void expect_sp4_matches_plain_sp1(const ModelConfig& config, const ModelOptions& options, std::uint64_t seed) {
  Reference ref = plain_reference(config, seed);
  expect_matches(run_at_sp(ref.model, ref.batch, 4, options), ref.result, 1e-5, "SP=4");
}

// The gradients of every parameter as one vector: |got − want| / |want|.
double whole_gradient_diff(const LossAndGrads& got, const LossAndGrads& want) {
  double diff = 0, norm = 0;
  for (const auto& [name, g] : want.grads) {
    diff += (got.grads.at(name).to(torch::kDouble) - g.to(torch::kDouble)).pow(2).sum().item<double>();
    norm += g.to(torch::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

// Attention in head groups equals all heads at once (G = 1) at the same SP degree, at SP 1, 2 and 4, with packed
// documents, GQA (each group's KV heads replicated to P where fewer), Qwen3's q/k norms, q/k/v and o_proj biases, a
// sliding window, every memory feature on, and each group's first stage issued ahead (heads_ahead): the loss and the
// whole gradient ≤ 1e-6 relative, each parameter's ≤ 5e-6. The same operations per head; what differs is the order
// of sums over the groups — o_proj's output over its columns, the layer input's gradient (each group's input norm and
// q/k/v projections), the shared norms' —
// whose last-bit differences grow most in the smallest gradients (norm weights, biases: sums over every token):
// observed ≤ 6e-7 each on the CI's CPU, up to 1.9e-6 on an AVX2 EPYC, the whole gradient ≤ 8e-7. A mistake in a group's heads, rows or weights shows at 1e-3 or more.
TEST(HeadGroups, EqualAllHeadsAtOnceAtEverySpDegree) {
  auto gqa = tiny_config(4, std::nullopt);   // 8 query heads, 4 KV heads, q/k norms, q/k/v biases
  gqa.num_heads = 8;
  gqa.o_bias = true;
  auto windowed = tiny_config(2, 5);          // 4 query heads, 2 KV heads, a window of 5
  const auto mqa = tiny_config(1, std::nullopt);   // 4 query heads sharing one KV head
  const auto features = ModelOptions().activation_checkpointing(true).offload_checkpoints(1).mlp_tile_tokens(3)
                            .logits_chunk_tokens(5);
  struct Case {
    const char* name;
    ModelConfig config;
    std::int64_t groups;
    int sp;
    ModelOptions options;
  };
  for (const Case& c : {Case{"GQA, 2 groups", gqa, 2, 1, {}}, Case{"GQA, 4 groups (one KV head each)", gqa, 4, 1, {}},
                        Case{"GQA, 2 groups, KV replicated to 4 ranks", gqa, 2, 4, {}},
                        Case{"GQA, 4 groups, SP 2, every memory feature", gqa, 4, 2, features},
                        Case{"GQA, 4 groups, SP 2, every memory feature, issued ahead", gqa, 4, 2,
                             ModelOptions(features).prefetch(true).heads_ahead(true)},
                        Case{"GQA, 2 groups, KV replicated to 4 ranks, issued ahead", gqa, 2, 4,
                             ModelOptions().heads_ahead(true)},
                        Case{"sliding window, 2 groups, SP 2", windowed, 2, 2, {}},
                        Case{"one KV head shared by 4 groups", mqa, 4, 1, features},
                        Case{"one KV head shared by 2 groups, replicated to 2 ranks", mqa, 2, 2, {}}}) {
    Reference ref = plain_reference(c.config, 17);
    const LossAndGrads all = run_at_sp(ref.model, ref.batch, c.sp, c.options);
    const LossAndGrads grouped =
        run_at_sp(ref.model, ref.batch, c.sp, ModelOptions(c.options).attention_head_groups(c.groups));
    expect_matches(grouped, all, 5e-6, c.name);
    EXPECT_LE(std::abs(grouped.loss - all.loss), 1e-6 * std::abs(all.loss)) << c.name;
    EXPECT_LE(whole_gradient_diff(grouped, all), 1e-6) << c.name;
    EXPECT_NE(grouped.loss, 0) << c.name;
  }
}

// A group holds whole KV heads or lies inside one: 4 query heads over 2 KV heads form 1, 2 or 4 groups, not 3.
TEST(HeadGroups, GroupsOfWholeKvHeadsOrInsideOne) {
  auto c = tiny_config(2, std::nullopt);
  for (const std::int64_t g : {1, 2, 4})
    EXPECT_NO_THROW(CausalLm(c, SequenceParallel(), ModelOptions().attention_head_groups(g))) << g;
  try {
    CausalLm(c, SequenceParallel(), ModelOptions().attention_head_groups(3));
    ADD_FAILURE() << "3 groups of 4 heads were accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("--attention-head-groups 3"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("use --attention-head-groups 1, 2, 4 at --sp 1"), std::string::npos) << e.hint();
  }
}

TEST(MemoryFeatures, SpFourEqualsSpOnePlain) {
  expect_sp4_matches_plain_sp1(tiny_config(2, std::nullopt), ModelOptions().logits_chunk_tokens(3), 9);
  expect_sp4_matches_plain_sp1(tiny_config(2, std::nullopt),
                               ModelOptions().activation_checkpointing(true).logits_chunk_tokens(3), 8);
  expect_sp4_matches_plain_sp1(tiny_config(1, std::nullopt),   // one KV head, replicated to 4 ranks
                               ModelOptions().activation_checkpointing(true).logits_chunk_tokens(3).mlp_tile_tokens(3),
                               13);
}

}  // namespace
}  // namespace ulysses::model

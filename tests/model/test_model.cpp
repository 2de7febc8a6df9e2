// Unit tests of the model library that need no Python: the Ulysses reshapes
// (P = 1 through a solo communicator; P = 2 and 4 through threads standing in for ranks, against the
// same model at P = 1), from-scratch init, strict weight loading, and the model against its description.
// The memory features against the plain path: test_memory_features.cpp; shared fixtures: model_fixtures.hpp.
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/utils.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/csrc/autograd/autograd.h>

#include "core/error.hpp"
#include "../torch_tensors.hpp"
#include "arch/model_config.hpp"
#include "arch/parameters.hpp"
#include "local_communicators.hpp"
#include "model_fixtures.hpp"
#include "model/causal_lm.hpp"
#include "model/document_attention.hpp"
#include "model/ring_attention.hpp"
#include "model/ulysses.hpp"
#include "model/weights.hpp"

namespace ulysses::model {
namespace {

namespace fs = std::filesystem;
using namespace fixtures;   // NOLINT(google-build-using-namespace): the tests' own fixtures

// A fresh directory under the system's temporary folder, removed with its contents at scope exit.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("ulysses-test-model-{}-{}", name, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path path;
};

// ---- Ulysses reshapes --------------------------------------------------------------------------

TEST(Ulysses, ExchangesAreTheIdentityAtOneRank) {
  testing::SoloCommunicator solo;
  auto x = torch::randn({2, 6, 4, 3});                         // [B, S, H, D]
  auto heads = scatter_heads_gather_sequence(solo, x);          // [B, S, H, D]
  EXPECT_TRUE(heads.equal(x));
  EXPECT_TRUE(scatter_sequence_gather_heads(solo, heads).equal(x));
  auto kv = torch::randn({2, 6, 1, 3});                        // [B, S, Hkv = 1, D]
  EXPECT_TRUE(replicate_kv_heads_for_sp(kv, 1).equal(kv));
}

TEST(Ulysses, ReplicatesEachKvHeadForConsecutiveRanks) {
  auto kv = at::arange(2).view({1, 1, 2, 1}).to(torch::kFloat);   // [B, S/P, Hkv = 2, D]: head h holds h
  auto rep = replicate_kv_heads_for_sp(kv, 4);                     // [B, S/P, P = 4, D]
  EXPECT_TRUE(rep.flatten().equal(torch::tensor({0.f, 0.f, 1.f, 1.f})));
}

TEST(Ulysses, MaskIsCausalPerDocumentAndWindowed) {
  auto docs = torch::tensor({0, 0, 0, 1, 1}, torch::kLong).unsqueeze(0);   // [B = 1, S = 5]
  auto mask = document_causal_mask(docs, 2)[0][0];                          // [S, S]
  auto expected = torch::tensor({1, 0, 0, 0, 0,
                                 1, 1, 0, 0, 0,
                                 0, 1, 1, 0, 0,
                                 0, 0, 0, 1, 0,
                                 0, 0, 0, 1, 1}).view({5, 5}).to(torch::kBool);
  EXPECT_TRUE(mask.equal(expected));
}

TEST(DocumentAttention, PlanListsDocumentsAndTheirFlatStarts) {
  // row 0: documents of 2 and 3 tokens; row 1: 3 tokens, then 2 (e.g. padding)
  auto docs = torch::tensor({0, 0, 1, 1, 1, 2, 2, 2, 3, 3}, torch::kLong).view({2, 5});   // [B = 2, S = 5]
  const AttentionPlan plan = plan_attention(docs, std::nullopt, torch::kCPU);
  using Runs = std::vector<std::pair<std::int64_t, std::int64_t>>;
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[0], (Runs{{0, 2}, {2, 5}}));
  EXPECT_EQ(plan.runs[1], (Runs{{0, 3}, {3, 5}}));
  EXPECT_TRUE(plan.cu_seqlens.equal(torch::tensor({0, 2, 5, 8, 10}, torch::kInt))) << plan.cu_seqlens;
  EXPECT_EQ(plan.max_len, 3);
  EXPECT_FALSE(plan.mask.defined());
  EXPECT_FALSE(plan.single_run());
}

TEST(DocumentAttention, NamesTheKernelItRuns) {
  const std::string cpu = attention_kernel(torch::kCPU, torch::kFloat, 4, 2, 8, false);
  EXPECT_NE(cpu.find("fused SDPA per document"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("Float on cpu"), std::string::npos) << cpu;
  const std::string windowed = attention_kernel(torch::kCPU, torch::kFloat, 4, 2, 8, true);
  EXPECT_NE(windowed.find("sliding-window mask"), std::string::npos) << windowed;
}

TEST(DocumentAttention, ExpandedKvHeadsEqualGroupedSdpaForwardAndBackward) {
  // What CUDA fp32 runs (grouped heads leave only the math kernel there): the expansion must map query head i
  // to kv head i / (h / hkv) exactly as SDPA's enable_gqa, gradients of the shared KV heads summed.
  torch::manual_seed(11);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble).requires_grad(true);
  const torch::Tensor q = torch::randn({2, 6, 16, 8}, opts), k = torch::randn({2, 2, 16, 8}, opts),
                      v = torch::randn({2, 2, 16, 8}, opts);   // [b, heads, S, D]
  const torch::Tensor w = torch::randn({2, 6, 16, 8}, torch::kDouble);
  auto run = [&](bool expand) {
    const torch::Tensor out = expand ? at::scaled_dot_product_attention(q, expand_kv_heads(k, 6), expand_kv_heads(v, 6),
                                                                        std::nullopt, 0.0, true)
                                     : at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true, std::nullopt,
                                                                        /*enable_gqa=*/true);
    const auto grads = torch::autograd::grad({(out * w).sum()}, {q, k, v});
    return std::vector<torch::Tensor>{out, grads[0], grads[1], grads[2]};
  };
  const auto grouped = run(false), expanded = run(true);
  for (std::size_t i = 0; i < grouped.size(); ++i)
    EXPECT_TRUE(torch::allclose(grouped[i], expanded[i], 1e-12, 1e-12)) << "output, dq, dk, dv: " << i;
  EXPECT_TRUE(expand_kv_heads(k, 6)[0][2].equal(k[0][0]) && expand_kv_heads(k, 6)[0][3].equal(k[0][1]));
}

TEST(DocumentAttention, FlashFollowsPyTorchsHardwareAndHeadDimRules) {
  EXPECT_FALSE(flash_supported(7, 5, 64));     // T4
  EXPECT_TRUE(flash_supported(8, 0, 256));     // A100
  EXPECT_TRUE(flash_supported(8, 6, 128));     // A10 / RTX 30
  EXPECT_FALSE(flash_supported(8, 6, 224));    // no backward kernels for 192 < head_dim <= 224 there
  EXPECT_TRUE(flash_supported(8, 6, 256));
  EXPECT_FALSE(flash_supported(8, 9, 200));    // L40S / RTX 40
  EXPECT_TRUE(flash_supported(8, 9, 192));
  EXPECT_FALSE(flash_supported(8, 7, 200));    // Jetson Orin: inside PyTorch's [sm86, sm89] range
  EXPECT_TRUE(flash_supported(9, 0, 224));     // H100 / H200
  EXPECT_TRUE(flash_supported(10, 0, 128));    // B200
  EXPECT_FALSE(flash_supported(12, 0, 208));   // RTX 50
  EXPECT_FALSE(flash_supported(13, 0, 128));   // beyond what PyTorch 2.11 lists
}

// ---- SP = P against SP = 1, ranks as threads ---------------------------------------------------


// ---- SP = U × R (Ulysses, and × ring: --sp-ring) against SP = 1, ranks as threads ------------------

// Rank s's columns of a [B, S] tensor: its slice's ranges, one after the other.
torch::Tensor columns(const torch::Tensor& t, const SequenceSlice& slice) {
  std::vector<torch::Tensor> parts;
  for (const TokenRange& r : slice.ranges) parts.push_back(t.narrow(1, r.begin, r.size()));
  return at::cat(parts, 1);
}

// U × R ranks against one, fp32: the logits of every token, the loss and every gradient (summed over ranks) within
// 1e-5. R = 1 is plain Ulysses. The packed batch (S = 16) has documents that cross slice, chunk and block edges (5, 7,
// 4 tokens; one of 16), longer than a block at R = 4; Hkv = 1 replicates one KV head to U; a window of 3 cuts pieces
// and skips others.
void expect_matches_single_rank(int U, int R, std::int64_t kv_heads, std::optional<std::int64_t> window,
                                     const ModelOptions& options = {}) {
  const auto config = tiny_config(kv_heads, window);
  const auto batch = packed_batch(config.vocab_size);
  CausalLm reference(config);
  init_weights(reference, 11);
  auto ref = reference->forward(batch.ids, batch.positions, batch.docs, batch.labels, /*keep_logits=*/true);
  (ref.loss_sum / ref.valid_count).backward();

  testing::RingThreads group(U, R);
  const int P = group.size();
  std::vector<CausalLm> ranks;
  std::vector<SequenceSlice> slices;
  std::vector<CausalLmOutput> outs(P);
  for (int s = 0; s < P; ++s) {
    ranks.emplace_back(config, group.sp(s), options);
    copy_parameters(reference, ranks.back());
    slices.push_back(group.sp(s).slice(batch.ids.size(1), "test"));
  }
  std::vector<std::thread> threads;
  for (int s = 0; s < P; ++s)
    threads.emplace_back([&, s] {
      auto mine = [&](const torch::Tensor& t) { return columns(t, slices[s]); };
      outs[s] = ranks[s]->forward(mine(batch.ids), mine(batch.positions), batch.docs, mine(batch.labels),
                                  /*keep_logits=*/true);
      (outs[s].loss_sum / ref.valid_count).backward();
    });
  for (auto& t : threads) t.join();

  const std::string what = fmt::format("U={} R={} Hkv={} window={}", U, R, kv_heads, window.value_or(0));
  torch::Tensor loss_sum = torch::zeros({}), count = torch::zeros({}, torch::kLong);
  for (int s = 0; s < P; ++s) {
    EXPECT_TRUE(outs[s].logits.allclose(columns(ref.logits, slices[s]), 0, 1e-5)) << what << " rank " << s;
    loss_sum += outs[s].loss_sum.detach();
    count += outs[s].valid_count;
  }
  EXPECT_NEAR(loss_sum.item<double>(), ref.loss_sum.item<double>(), 1e-4) << what;
  EXPECT_EQ(count.item<std::int64_t>(), ref.valid_count.item<std::int64_t>()) << what;
  for (const auto& item : reference->named_parameters()) {
    auto sum = torch::zeros_like(item.value());
    for (auto& m : ranks) sum += m->named_parameters()[item.key()].grad();
    EXPECT_LE(rel_diff(sum, item.value().grad()), 1e-5) << what << " " << item.key();
  }
}

TEST(UlyssesSp, TwoRanksMatchOneWithKvHeadsSplit) { expect_matches_single_rank(2, 1, 2, std::nullopt); }
TEST(UlyssesSp, FourRanksMatchOneWithKvHeadsReplicated) { expect_matches_single_rank(4, 1, 2, 3); }
TEST(UlyssesSp, FourRanksMatchOneWithOneKvHead) { expect_matches_single_rank(4, 1, 1, std::nullopt); }
TEST(UlyssesRing, RingOfTwoMatchesOneRank) { expect_matches_single_rank(1, 2, 2, std::nullopt); }
TEST(UlyssesRing, TwoByTwoMatchesOneRankWithAWindow) { expect_matches_single_rank(2, 2, 2, 3); }
TEST(UlyssesRing, RingOfFourMatchesOneRankWithOneKvHead) { expect_matches_single_rank(1, 4, 1, 5); }
TEST(UlyssesRing, FourByTwoMatchesOneRankWithKvReplicated) { expect_matches_single_rank(4, 2, 1, std::nullopt); }
TEST(UlyssesRing, EveryMemoryFeatureMatchesOneRank) {
  expect_matches_single_rank(2, 2, 2, 3, ModelOptions().activation_checkpointing(true).mlp_tile_tokens(2)
                                                  .logits_chunk_tokens(3).attention_head_groups(2));
}

// The pieces written out (the kernel off CPU) equal PyTorch's flash attention for CPU: a ring of 2 as threads over one
// packed row (documents of 5, 7 and 4 tokens, S = 16), 4 query heads on 2 KV heads, without and with a window of 3
// (masked and skipped pieces): outputs and the gradients of q, k and v within 1e-5.
TEST(UlyssesRing, WrittenOutPiecesEqualTheFlashKernel) {
  const auto docs = packed_batch(64).docs.narrow(0, 0, 1);   // [1, 16]
  torch::manual_seed(5);
  std::vector<std::vector<torch::Tensor>> inputs;   // per rank: q [1, 8, 4, 8], k, v [1, 8, 2, 8], dout [1, 8, 4, 8]
  for (int r = 0; r < 2; ++r)
    inputs.push_back({torch::randn({1, 8, 4, 8}), torch::randn({1, 8, 2, 8}), torch::randn({1, 8, 2, 8}),
                      torch::randn({1, 8, 4, 8})});
  for (const std::optional<std::int64_t> window : {std::optional<std::int64_t>(), std::optional<std::int64_t>(3)}) {
    const AttentionPlan plan = plan_attention(docs, window, torch::kCPU, /*dense_mask=*/false);
    std::map<PieceKernel, std::vector<std::vector<torch::Tensor>>> got;   // per rank: out, dq, dk, dv
    for (const PieceKernel kernel : {PieceKernel::kAuto, PieceKernel::kWrittenOut}) {
      testing::ThreadGroup ring(2);
      got[kernel].resize(2);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          std::vector<torch::Tensor> x;
          for (int i = 0; i < 3; ++i) x.push_back(inputs[r][i].clone().requires_grad_(true));
          const auto out = ring_attention(ring.rank(r), RingPosition{16, r, 2}, x[0], x[1], x[2], plan, 0.35, kernel);
          out.backward(inputs[r][3]);
          got[kernel][r] = {out.detach(), x[0].grad(), x[1].grad(), x[2].grad()};
        });
      for (auto& t : threads) t.join();
    }
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 4; ++i)
        EXPECT_LE(rel_diff(got[PieceKernel::kWrittenOut][r][i], got[PieceKernel::kAuto][r][i]), 1e-5)
            << "rank " << r << " tensor " << i << " window " << window.value_or(0);
  }
}

// Attention by pieces keeps its output and log-sum-exp, and its backward from them (no attention forward) gives the
// gradients of the fused per-document attention: 2 packed rows (S = 16), 4 query heads on 2 KV heads, without and
// with a window of 3 — output and the gradients of q, k and v within 1e-6. A kept lse off by 0.1 changes them (the
// backward reads it).
TEST(AttentionPieces, BackwardFromTheKeptOutputEqualsDocumentAttention) {
  const auto docs = packed_batch(64).docs.narrow(0, 0, 2);   // [2, 16]
  torch::manual_seed(6);
  const torch::Tensor q = torch::randn({2, 16, 4, 8}), k = torch::randn({2, 16, 2, 8}), v = torch::randn({2, 16, 2, 8});
  const torch::Tensor dout = torch::randn({2, 16, 4, 8});
  const double scale = 0.35;
  auto grads = [&](const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                                     const torch::Tensor&)>& attention) {
    std::vector<torch::Tensor> x{q.clone().requires_grad_(true), k.clone().requires_grad_(true),
                                 v.clone().requires_grad_(true)};
    const torch::Tensor out = attention(x[0], x[1], x[2]);
    out.backward(dout);
    return std::vector<torch::Tensor>{out.detach(), x[0].grad(), x[1].grad(), x[2].grad()};
  };
  for (const std::optional<std::int64_t> window : {std::optional<std::int64_t>(), std::optional<std::int64_t>(3)}) {
    const AttentionPlan plan = plan_attention(docs, window, torch::kCPU);
    const auto want = grads([&](auto& a, auto& b, auto& c) { return document_attention(a, b, c, plan, scale); });
    const auto [out, lse] = attention_with_lse(q, k, v, plan, scale);   // [2, 16, 4, 8], [2, 4, 16]
    EXPECT_FALSE(out.requires_grad());
    EXPECT_LE(rel_diff(out, want[0]), 1e-6) << "window " << window.value_or(0);
    const auto got = grads([&](auto& a, auto& b, auto& c) {
      return attention_from_kept(a, b, c, out, lse, plan, scale);
    });
    for (int i = 0; i < 4; ++i)
      EXPECT_LE(rel_diff(got[i], want[i]), 1e-6) << "tensor " << i << " window " << window.value_or(0);
    const auto off = grads([&](auto& a, auto& b, auto& c) {
      return attention_from_kept(a, b, c, out, lse + 0.1, plan, scale);
    });
    EXPECT_GT(rel_diff(off[1], want[1]), 1e-2) << "window " << window.value_or(0);
  }
}

// FlashAttention's window (piece_window; sizes at or past Lk mean no limit, as the kernel clamps them) allows the same
// keys as the rule itself — key ≤ query, query − key < window — for every masked piece of every pair of 4 or 8 chunks
// over documents of 5, 7, 4 and 16 tokens (S = 32), at windows 1 to 9.
TEST(UlyssesRing, FlashWindowAllowsTheSameKeys) {
  std::vector<std::int64_t> ids;
  for (const auto& [doc, length] : std::vector<std::pair<int, int>>{{0, 5}, {1, 7}, {2, 4}, {3, 16}})
    ids.insert(ids.end(), length, doc);
  const torch::Tensor docs = torch::tensor(ids).unsqueeze(0);   // [1, 32]
  int masked = 0;
  for (const std::int64_t window : {1, 2, 3, 5, 9}) {
    const AttentionPlan plan = plan_attention(docs, window, torch::kCPU, /*dense_mask=*/false);
    for (const std::int64_t chunk : {4, 8})
      for (std::int64_t a = 0; a < 32; a += chunk)
        for (std::int64_t b = 0; b <= a; b += chunk)
          for (const AttentionPiece& p : attention_pieces(plan, {a, a + chunk}, {b, b + chunk}, window)) {
            if (!p.masked) continue;
            ++masked;
            const PieceWindow w = piece_window(p, window);
            const std::int64_t Lq = p.q.size(), Lk = p.k.size();
            ASSERT_GE(w.left, 0) << "piece q " << p.q.begin << " k " << p.k.begin;
            ASSERT_GE(w.right, 0) << "piece q " << p.q.begin << " k " << p.k.begin;
            const auto unlimited = [&](std::int64_t size) { return size >= Lk; };
            for (std::int64_t i = 0; i < Lq; ++i)
              for (std::int64_t j = 0; j < Lk; ++j) {
                const std::int64_t query = p.q.begin + i, key = p.k.begin + j, diagonal = i + Lk - Lq;
                const bool flash = (unlimited(w.left) || j >= diagonal - w.left) &&
                                   (unlimited(w.right) || j <= diagonal + w.right);
                EXPECT_EQ(flash, key <= query && query - key < window)
                    << "window " << window << " query " << query << " key " << key;
              }
          }
  }
  EXPECT_GE(masked, 40);   // the rule was checked on pieces that need it
}

// The slices: two ranges per rank, chunks r and 2R−1−r split over the Ulysses group; together every token once.
TEST(UlyssesRing, SlicesBalanceTheCausalWork) {
  testing::RingThreads group(2, 2);   // S = 16: chunks of 4, pieces of 2
  const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> want = {
      {{0, 2}, {12, 14}}, {{2, 4}, {14, 16}}, {{4, 6}, {8, 10}}, {{6, 8}, {10, 12}}};
  for (int s = 0; s < 4; ++s) {
    std::vector<std::pair<std::int64_t, std::int64_t>> got;
    for (const TokenRange& r : group.sp(s).slice(16, "t").ranges) got.emplace_back(r.begin, r.end);
    EXPECT_EQ(got, want[s]) << "rank " << s;
  }
}

TEST(UlyssesSp, RejectsHeadsThatDoNotSplit) {
  testing::ThreadGroup three(3);
  try {
    CausalLm m(tiny_config(2, std::nullopt), testing::sp_of(three.rank(0)));
    ADD_FAILURE() << "4 heads accepted at SP 3";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("attention heads (4) are not divisible by --sp (3)"), std::string::npos)
        << e.what();
  }
}

TEST(UlyssesSp, RejectsASequenceThatDoesNotSplit) {
  testing::ThreadGroup two(2);
  CausalLm m(tiny_config(2, std::nullopt), testing::sp_of(two.rank(0)));
  auto x = torch::zeros({1, 7}, torch::kLong);   // S/P = 7 would need S = 14; doc_ids says 15
  try {
    m->forward(x, x, torch::zeros({1, 15}, torch::kLong), x);
    ADD_FAILURE() << "S = 15 accepted at SP 2";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("(15) is not divisible by the SP degree (2)"), std::string::npos) << e.what();
  }
}

// ---- init and weights --------------------------------------------------------------------------

TEST(Weights, InitIsSeededAndHfStyle) {
  auto config = tiny_config(2, std::nullopt);
  config.pad_token_id = 5;
  CausalLm a(config), b(config), c(config);
  init_weights(a, 1);
  init_weights(b, 1);
  init_weights(c, 2);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(item.value().equal(pb[item.key()])) << item.key();
    const auto& name = item.key();
    if (name.ends_with("norm.weight")) {
      EXPECT_TRUE(item.value().eq(1).all().item<bool>()) << name;
    } else if (name.ends_with(".bias")) {
      EXPECT_TRUE(item.value().eq(0).all().item<bool>()) << name;
    } else {
      EXPECT_FALSE(item.value().equal(pc[name])) << name;
      EXPECT_NEAR(item.value().std().item<double>(), 0.2, 0.05) << name;
    }
  }
  EXPECT_TRUE(pa["model.embed_tokens.weight"][5].eq(0).all().item<bool>());
}

std::map<std::string, torch::Tensor> parameters_of(CausalLm& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m->named_parameters()) out[item.key()] = item.value().detach();
  return out;
}

TEST(Weights, LoadsWhatItSavedAndToleratesRotaryBuffers) {
  CausalLm source(tiny_config(2, std::nullopt)), target(tiny_config(2, std::nullopt));
  init_weights(source, 1);
  auto params = parameters_of(source);
  params["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::ones({4});
  TempDir dir("roundtrip");
  ulysses::testing::write_tensors(dir.path / "model.safetensors", params);
  load_hf_weights(target, dir.path);
  for (const auto& item : target->named_parameters())
    EXPECT_TRUE(item.value().equal(params[item.key()])) << item.key();
}

TEST(Weights, RejectsMissingUnexpectedAndMisshapenTensors) {
  CausalLm model(tiny_config(2, std::nullopt));
  auto params = parameters_of(model);
  params.erase("model.norm.weight");
  params["lm_head.bias"] = torch::zeros({64});
  params["model.layers.1.mlp.up_proj.weight"] = torch::zeros({48, 33});
  TempDir dir("bad");
  ulysses::testing::write_tensors(dir.path / "model.safetensors", params);
  try {
    load_hf_weights(model, dir.path);
    ADD_FAILURE() << "accepted";
  } catch (const BadInput& e) {
    const std::string what = e.what();
    for (const char* part : {"1 missing: model.norm.weight", "1 unexpected: lm_head.bias",
                             "model.layers.1.mlp.up_proj.weight [48, 33] (expected [48, 32])"})
      EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

// ---- the model against its description ---------------------------------------------------------

TEST(ModelDescription, ParametersAreExactlyThoseOfArchParameters) {
  auto plain = tiny_config(4, std::nullopt);
  plain.qk_norm = plain.qkv_bias = false;
  plain.tie_word_embeddings = true;
  auto with_o_bias = tiny_config(2, std::nullopt);
  with_o_bias.o_bias = true;
  for (const ModelConfig& c : {tiny_config(2, std::nullopt), plain, with_o_bias}) {
    CausalLm m(c);
    const auto params = m->named_parameters();
    const std::vector<arch::ParameterSpec> expected = arch::parameters(c);
    ASSERT_EQ(params.size(), expected.size());
    std::int64_t count = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(params[i].key(), expected[i].name);   // same names, same order
      EXPECT_EQ(params[i].value().sizes().vec(), expected[i].shape) << expected[i].name;
      count += params[i].value().numel();
    }
    EXPECT_EQ(count, arch::parameter_count(c));
  }
}

// A layer computes the same from weights it does not own (copies in another buffer) as from its own.
TEST(ModelDescription, LayerForwardTakesWeightsFromElsewhere) {
  CausalLm m(tiny_config(2, std::nullopt));
  init_weights(m, 5);
  auto& layer = *m->model->layers->ptr<DecoderLayerImpl>(0);
  const auto batch = packed_batch(64);
  auto x = torch::randn({2, 16, 32});                                          // [B, S, hidden]
  const auto rope = rope_tables(rope_frequencies(arch::layer_spec(tiny_config(2, std::nullopt), 0).attention.rope),
                                batch.positions, {}, torch::kFloat);
  const AttentionPlan plan = plan_attention(batch.docs, std::nullopt, torch::kCPU);
  torch::NoGradGuard no_grad;
  const DecoderLayerWeights own = layer.weights();
  DecoderLayerWeights copy = own;   // every tensor replaced by a clone: storage the layer does not own
  for (torch::Tensor* t : {&copy.input_norm, &copy.post_attention_norm, &copy.attention.q, &copy.attention.k,
                           &copy.attention.v, &copy.attention.o, &copy.attention.q_bias, &copy.attention.k_bias,
                           &copy.attention.v_bias, &copy.attention.q_norm, &copy.attention.k_norm, &copy.mlp.gate,
                           &copy.mlp.up, &copy.mlp.down})
    *t = t->clone();
  const auto expected = layer.forward(x, rope, plan);
  EXPECT_TRUE(layer.forward(x, rope, plan, copy).equal(expected));
  copy.mlp.down.mul_(2);   // and the weights given are the ones used
  EXPECT_FALSE(layer.forward(x, rope, plan, copy).equal(expected));
}

}  // namespace
}  // namespace ulysses::model

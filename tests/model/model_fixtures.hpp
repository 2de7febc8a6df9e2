// The model tests' shared fixtures (test_model.cpp: the model against transformers' description, Ulysses at SP = P;
// test_memory_features.cpp: each memory feature against the plain path): a tiny config, a packed batch of
// documents, a model's loss and gradients, and the comparison with tolerances.
//   Reference ref = plain_reference(tiny_config(2, std::nullopt), 7);
//   expect_matches(loss_and_grads(other, ref.batch), ref.result, 1e-6, "tiled");
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "arch/model_config.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"

namespace ulysses::model::fixtures {

inline ModelConfig tiny_config(std::int64_t kv_heads, std::optional<std::int64_t> window) {
  ModelConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = kv_heads;
  c.head_dim = 8;
  c.sliding_window = window;
  c.qk_norm = true;
  c.qkv_bias = true;
  c.initializer_range = 0.2;
  return c;
}

struct Batch {
  torch::Tensor ids, positions, docs, labels;   // [B, S]
  Batch slice(std::int64_t rank, std::int64_t P) const {   // rank's [B, S/P]; docs stay whole
    const auto n = ids.size(1) / P;
    return {ids.narrow(1, rank * n, n), positions.narrow(1, rank * n, n), docs, labels.narrow(1, rank * n, n)};
  }
};

inline Batch packed_batch(std::int64_t vocab) {   // B = 2, S = 16; row 0 holds documents of 5, 7, 4 tokens
  torch::manual_seed(3);
  Batch b;
  b.ids = torch::randint(vocab, {2, 16}, torch::kLong);
  b.docs = torch::cat({torch::tensor({0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2}, torch::kLong).unsqueeze(0),
                       torch::zeros({1, 16}, torch::kLong)});
  b.positions = torch::cat({torch::tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, torch::kLong).unsqueeze(0),
                            at::arange(16, torch::kLong).unsqueeze(0)});
  b.labels = at::roll(b.ids, -1, 1);
  b.labels.masked_fill_(at::roll(b.docs, -1, 1) != b.docs, kIgnoreLabel);   // document ends
  b.labels.select(1, 15).fill_(kIgnoreLabel);
  return b;
}

inline void copy_parameters(CausalLm& from, CausalLm& to) {
  torch::NoGradGuard no_grad;
  auto src = from->named_parameters();
  for (auto& item : to->named_parameters()) item.value().copy_(src[item.key()]);
}

inline double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).norm().item<double>() /
         std::max(b.to(torch::kDouble).norm().item<double>(), 1e-30);
}

struct LossAndGrads {
  double loss = 0;
  std::int64_t count = 0;
  std::map<std::string, torch::Tensor> grads;
};

inline LossAndGrads loss_and_grads(CausalLm& m, const Batch& b) {
  m->zero_grad();
  const CausalLmOutput out = m->forward(b.ids, b.positions, b.docs, b.labels);
  out.loss_sum.backward();
  LossAndGrads r{out.loss_sum.item<double>(), out.valid_count.item<std::int64_t>(), {}};
  for (const auto& item : m->named_parameters()) r.grads[item.key()] = item.value().grad().clone();
  return r;
}

// A plain model of `config` (seeded weights, `options` with no memory feature), the packed batch, and the
// model's loss and gradients on it: what each memory feature is compared with.
struct Reference {
  CausalLm model;
  Batch batch;
  LossAndGrads result;
};

inline Reference plain_reference(const ModelConfig& config, std::uint64_t seed, const ModelOptions& options = {}) {
  CausalLm model(config, SequenceParallel(), options);
  init_weights(model, seed);
  Batch batch = packed_batch(config.vocab_size);
  LossAndGrads result = loss_and_grads(model, batch);
  return {model, batch, result};
}

// got against want: loss and every gradient bit for bit (tolerance 0) or within `tolerance` relative.
inline void expect_matches(const LossAndGrads& got, const LossAndGrads& want, double tolerance,
                           const std::string& what) {
  if (tolerance == 0) {
    EXPECT_EQ(got.loss, want.loss) << what;
    for (const auto& [name, g] : want.grads) EXPECT_TRUE(got.grads.at(name).equal(g)) << name << " " << what;
    return;
  }
  EXPECT_LE(std::abs(got.loss - want.loss), tolerance * std::abs(want.loss)) << what;
  for (const auto& [name, g] : want.grads)
    EXPECT_LE(rel_diff(got.grads.at(name), g), tolerance) << name << " " << what;
}

}  // namespace ulysses::model::fixtures

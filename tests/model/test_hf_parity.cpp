// The C++ model against Hugging Face transformers, model by model (make_hf_reference.py writes the
// models and the reference outputs; run_hf_parity.sh runs both).
//
// Usage: test_model_hf_parity REFERENCE_DIR [gtest flags]
// For each architecture directory: load config.json + model.safetensors, run the reference inputs
// (one document per row, then packed documents), and check logits, loss = sum / count and the gradient
// of every parameter against transformers within 2e-5 relative (fp32; see kTolerance). Our parameter names must be exactly the
// reference's gradient names. The largest differences are printed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "arch/model_config.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"
#include "../torch_tensors.hpp"

namespace ulysses::model {
namespace {

namespace fs = std::filesystem;

fs::path g_reference_dir;
// Relative differences ||ours - theirs|| / ||theirs||, per tensor. Observed on x86 CPUs (torch 2.11, fp32):
// logits ≤ 5e-7, loss ≤ 2e-7, gradients ≤ 2e-6 — the rounding of the same fp32 math summed in another order
// (fused SDPA per document against transformers' masked SDPA, at::linear against nn.Linear). The bound is
// about 10x that: a real error (a wrong mask, scale or RoPE, a 0.1% gradient error) is far above it.
constexpr double kTolerance = 2e-5;

double rel_diff(const torch::Tensor& ours, const torch::Tensor& theirs) {
  EXPECT_EQ(ours.sizes(), theirs.sizes());
  const auto a = ours.to(torch::kDouble), b = theirs.to(torch::kDouble);
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

void check_case(CausalLm& model, const std::string& arch, const std::string& which) {
  auto ref = testing::read_tensors(g_reference_dir / arch / ("ref_" + which + ".safetensors"));
  model->zero_grad();
  auto out = model->forward(ref["input_ids"], ref["position_ids"], ref["doc_ids"], ref["labels"],
                            /*keep_logits=*/true);
  auto loss = out.loss_sum / out.valid_count;
  loss.backward();

  const double logits = rel_diff(out.logits.detach(), ref["logits"]);
  const double loss_diff = rel_diff(loss.detach(), ref["loss"]);
  double grad = 0;
  std::string worst;
  std::size_t grads_in_reference = 0;
  for (const auto& [name, t] : ref) grads_in_reference += name.starts_with("grad.");
  const auto params = model->named_parameters();
  EXPECT_EQ(params.size(), grads_in_reference) << "our parameters and transformers' differ in number";
  for (const auto& item : params) {
    auto it = ref.find("grad." + item.key());
    if (it == ref.end()) {
      ADD_FAILURE() << item.key() << " is not a parameter of the transformers model";
      continue;
    }
    const double d = rel_diff(item.value().grad(), it->second);
    if (d >= grad) grad = d, worst = item.key();
  }
  std::printf("%-10s %-6s  loss %.4f  relative diff: logits %.2e  loss %.2e  worst grad %.2e (%s)\n", arch.c_str(),
              which.c_str(), ref["loss"].item<double>(), logits, loss_diff, grad, worst.c_str());
  EXPECT_LT(logits, kTolerance);
  EXPECT_LT(loss_diff, kTolerance);
  EXPECT_LT(grad, kTolerance) << worst;
}

class HfParity : public ::testing::TestWithParam<const char*> {};

TEST_P(HfParity, LogitsLossAndGradients) {
  const std::string name = GetParam();
  CausalLm model(arch::read_model_config(g_reference_dir / name / "config.json"));
  load_hf_weights(model, g_reference_dir / name);
  check_case(model, name, "plain");
  check_case(model, name, "packed");
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfParity,
                         ::testing::Values("llama", "llama_tied", "mistral", "qwen2", "qwen3"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ulysses::model

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s REFERENCE_DIR [gtest flags]\n", argv[0]);
    return 2;
  }
  ulysses::model::g_reference_dir = argv[1];
  return RUN_ALL_TESTS();
}

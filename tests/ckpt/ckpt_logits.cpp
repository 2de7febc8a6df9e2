// Our model's logits for given token ids, from a checkpoint directory (test helper; links LibTorch, the
// tool under test does not). The checkpoint's model.safetensors + config.json are loaded with the
// trainer's own code (model::load_hf_weights reads a step directory like an HF one), one sequence is run
// on the CPU in fp32, and logits [1, S, V] are saved as F32 "logits" in a safetensors file.
//
// usage: ckpt_logits IDS CKPT_DIR OUT.safetensors [CKPT_DIR OUT.safetensors ...]
//   IDS: comma-separated token ids (one document, positions 0..S-1)
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "model/causal_lm.hpp"
#include "arch/model_config.hpp"
#include "model/weights.hpp"

namespace fs = std::filesystem;
using namespace ulysses;

int main(int argc, char** argv) {
  if (argc < 4 || argc % 2 != 0) {
    std::fprintf(stderr, "usage: %s IDS CKPT_DIR OUT.safetensors [CKPT_DIR OUT ...]\n", argv[0]);
    return 2;
  }
  std::vector<std::int64_t> ids;
  std::stringstream in(argv[1]);
  for (std::string tok; std::getline(in, tok, ',');) ids.push_back(std::stoll(tok));
  const auto s = static_cast<std::int64_t>(ids.size());
  torch::NoGradGuard no_grad;
  torch::Tensor input = torch::tensor(ids, torch::kLong).view({1, s});                 // [1, S]
  torch::Tensor positions = torch::arange(s, torch::kLong).view({1, s});               // [1, S]
  torch::Tensor docs = torch::zeros({1, s}, torch::kLong);                             // [1, S]
  torch::Tensor labels = torch::full({1, s}, model::kIgnoreLabel, torch::kLong);       // no loss needed
  for (int i = 2; i < argc; i += 2) {
    const fs::path dir = argv[i];
    model::CausalLm lm(arch::read_model_config(dir / "config.json"));
    model::load_hf_weights(lm, dir);
    lm->eval();
    torch::Tensor logits = lm->forward(input, positions, docs, labels, /*keep_logits=*/true).logits;   // [1, S, V]
    logits = logits.to(torch::kFloat32).contiguous();
    st::Writer w(argv[i + 1], {{"logits", st::DType::kF32, logits.sizes().vec()}});
    w.write_next(logits.data_ptr(), static_cast<std::uint64_t>(logits.numel()) * sizeof(float));
    w.finish();
  }
  return 0;
}

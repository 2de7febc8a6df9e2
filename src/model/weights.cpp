#include "model/weights.hpp"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/rms_norm.hpp"
#include "model/lora.hpp"

namespace ulysses::model {
namespace {

// "a, b, c and 4 more"
std::string first_few(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 4;
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kShown));
  std::string s = fmt::format("{}", fmt::join(shown, ", "));
  return names.size() > kShown ? fmt::format("{} and {} more", s, names.size() - kShown) : s;
}

torch::ScalarType float_dtype(const st::TensorInfo& t, const std::filesystem::path& dir) {
  switch (t.dtype) {
    case st::DType::kF32: return torch::kFloat;
    case st::DType::kBF16: return torch::kBFloat16;
    case st::DType::kF16: return torch::kHalf;
    default:
      throw BadInput(fmt::format("{}: tensor {} has dtype {}; model weights must be F32, BF16 or F16",
                                 dir.string(), t.name, st::dtype_name(t.dtype)),
                     "convert the weights to F32, BF16 or F16 (safetensors from transformers' save_pretrained are)");
  }
}

bool is_rotary_buffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

// Names missing from the directory, present with another shape, or present but not parameters.
void check_names_and_shapes(const torch::OrderedDict<std::string, torch::Tensor>& params,
                            const st::HfWeights& weights, const std::filesystem::path& dir) {
  std::vector<std::string> missing, wrong_shape, unexpected;
  for (const auto& item : params) {
    const auto& name = item.key();
    const auto& p = item.value();
    if (!weights.contains(name)) {
      missing.push_back(name);
    } else if (p.sizes() != c10::IntArrayRef(weights.info(name).shape)) {
      wrong_shape.push_back(fmt::format("{} [{}] (expected [{}])", name, fmt::join(weights.info(name).shape, ", "),
                                        fmt::join(p.sizes(), ", ")));
    }
  }
  for (const auto& name : weights.names())
    if (!params.contains(name) && !is_rotary_buffer(name)) unexpected.push_back(name);
  if (missing.empty() && wrong_shape.empty() && unexpected.empty()) return;
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back(fmt::format("{} missing: {}", missing.size(), first_few(missing)));
  if (!wrong_shape.empty())
    problems.push_back(fmt::format("{} with another shape: {}", wrong_shape.size(), first_few(wrong_shape)));
  if (!unexpected.empty())
    problems.push_back(fmt::format("{} unexpected: {}", unexpected.size(), first_few(unexpected)));
  throw BadInput(fmt::format("{}: the weights do not fit the model of its config.json; {}", dir.string(),
                             fmt::join(problems, "; ")),
                 "check that config.json and the safetensors files come from the same model");
}

// Where a parameter's values go: into it, or (a sharded model, whose parameters are placeholders) through a
// whole temporary of its shape into this rank's shard. The temporary sees the same operations, so the same
// random draws.
void set_parameter(CausalLm& model, const std::string& name, torch::Tensor& param,
                   const std::function<void(torch::Tensor&)>& fill) {
  if (!model->sharded_states()) {
    fill(param);
    return;
  }
  torch::Tensor whole = torch::empty(param.sizes(), torch::kFloat);
  fill(whole);
  model->sharded_states()->load(name, whole);
}

}  // namespace

void init_weights(CausalLm& model, std::uint64_t seed) {
  init_base_weights(model, seed);
  init_adapters(model, seed);
}

void init_adapters(CausalLm& model, std::uint64_t seed) {
  torch::manual_seed(seed + 1);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (item.key().ends_with(".lora_A.weight")) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(item.value().size(1)));   // kaiming_uniform_(a=√5)
      set_parameter(model, item.key(), item.value(), [&](torch::Tensor& t) { t.uniform_(-bound, bound); });
    } else if (item.key().ends_with(".lora_B.weight")) {
      set_parameter(model, item.key(), item.value(), [](torch::Tensor& t) { t.zero_(); });
    }
  }
}

void init_base_weights(CausalLm& model, std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  const double init_std = model->config().initializer_range;
  auto normal = [&](torch::Tensor& t) { t.normal_(0.0, init_std); };
  for (const auto& item : model->named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    const auto& module = item.value();
    if (auto* linear = module->as<torch::nn::LinearImpl>()) {
      set_parameter(model, prefix + "weight", linear->weight, normal);
      if (linear->bias.defined())
        set_parameter(model, prefix + "bias", linear->bias, [](torch::Tensor& t) { t.zero_(); });
    } else if (auto* embedding = module->as<torch::nn::EmbeddingImpl>()) {
      const auto pad = embedding->options.padding_idx();
      set_parameter(model, prefix + "weight", embedding->weight, [&](torch::Tensor& t) {
        normal(t);
        if (pad) t[*pad].zero_();
      });
    } else if (auto* norm = module->as<RMSNormImpl>()) {
      set_parameter(model, prefix + "weight", norm->weight, [](torch::Tensor& t) { t.fill_(1.0); });
    }
  }
}

void load_hf_weights(CausalLm& model, const std::filesystem::path& dir) {
  const st::HfWeights weights(dir);
  torch::OrderedDict<std::string, torch::Tensor> params;   // the base's: LoRA adapters are not in a model folder
  for (const auto& item : model->named_parameters())
    if (!is_adapter_parameter(item.key())) params.insert(item.key(), item.value());
  check_names_and_shapes(params, weights, dir);
  torch::NoGradGuard no_grad;
  for (auto& item : params) {
    const auto& info = weights.info(item.key());
    auto host = torch::empty(info.shape, torch::dtype(float_dtype(info, dir)));   // the file's shape and dtype
    weights.read(item.key(), host.data_ptr());
    set_parameter(model, item.key(), item.value(), [&](torch::Tensor& t) { t.copy_(host); });   // its dtype and device
  }
}

}  // namespace ulysses::model

#include "train/options.hpp"

#include <fmt/format.h>

#include "arch/model_config.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/regular_file.hpp"
#include "io/checkpoint_format.hpp"

namespace ulysses::train {

nlohmann::json to_json(const TrainOptions& o) {
  nlohmann::json j = {{"data", o.data.string()},         {"model_config", o.model_config.string()},
          {"init_from", o.init_from.string()}, {"output", o.output.string()},
          {"tensorboard", o.tensorboard},
          {"sp", o.sp},                      {"sp_ring", o.sp_ring},
          {"micro_batch", o.micro_batch},
          {"grad_accum", o.grad_accum},      {"steps", o.steps},
          {"lr", o.lr},                      {"min_lr_ratio", o.min_lr_ratio},
          {"warmup", o.warmup},              {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},  {"beta1", o.beta1},
          {"beta2", o.beta2},                {"eps", o.eps},
          {"clip", o.clip},                  {"seed", o.seed},
          {"save_every", o.save_every},      {"keep_last", o.keep_last},
          {"eval_every", o.eval_every},      {"eval_sequences", o.eval_sequences},
          {"on_nonfinite", o.on_nonfinite},  {"max_skipped_steps", o.max_skipped_steps},
          {"device", o.device},              {"precision", o.memory.precision},
          {"reduce_dtype", o.memory.reduce_dtype}, {"fp32_residual", o.memory.fp32_residual},
          {"attention_head_groups", o.memory.attention_head_groups == plan::kAutoHeadGroups
                                        ? nlohmann::json("auto") : nlohmann::json(o.memory.attention_head_groups)},
          {"tiled_logits", o.memory.tiled_logits},  {"logits_chunk_tokens", o.memory.logits_chunk_tokens},
          {"sharding", o.memory.sharding}, {"offload_optimizer", o.memory.offload_optimizer},
          {"offload_params", o.memory.offload_params},
          {"activation_checkpointing", o.memory.activation_checkpointing},
          {"offload_checkpoints", o.memory.offload_checkpoints},
          {"tiled_mlp", o.memory.tiled_mlp},        {"mlp_tile_tokens", o.memory.mlp_tile_tokens},
          {"prefetch", o.memory.prefetch},
          {"lora_rank", o.memory.lora_rank}, {"lora_alpha", o.memory.lora_alpha},
          {"lora_targets", o.memory.lora_rank > 0 ? plan::lora_targets(o.memory.lora_targets)
                                                  : std::vector<std::string>{}},
          {"lora_rslora", o.memory.lora_rslora},
          {"memory_profile", o.memory_profile},
          {"comm", o.comm},                  {"comm_timeout", o.comm_timeout},
          {"save_timeout", o.save_timeout},  {"stop_margin", o.stop_margin},
          {"peak_tflops", o.peak_tflops},
          {"threads", o.threads},            {"island_size", o.island_size},
          {"allow_sp_across_islands", o.allow_sp_across_islands},
          {"ignore_memory_plan", o.ignore_memory_plan}};
  if (!o.rope.scaling.empty()) j["rope_scaling"] = o.rope.scaling;   // only when given: a run without them records
  if (o.rope.theta != 0) j["rope_theta"] = o.rope.theta;              // what it did before they existed
  if (o.router_aux_loss_coef >= 0) j["router_aux_loss_coef"] = o.router_aux_loss_coef;
  return j;
}

std::filesystem::path model_config_path(const TrainOptions& o, const std::optional<std::filesystem::path>& from) {
  namespace fs = std::filesystem;
  if (!o.init_from.empty()) return o.init_from / checkpoint::kConfig;
  const std::optional<fs::path> stored =
      from && fs::exists(*from / checkpoint::kConfig) ? std::optional(*from / checkpoint::kConfig) : std::nullopt;
  if (o.model_config.empty()) {
    if (stored) return *stored;
    throw BadInput("no model given", "pass --model-config config.json (from scratch) or --init-from HF_DIR");
  }
  auto content = [](const fs::path& f) { return nlohmann::json::parse(arch::read_model_config_file(f).json.dump()); };
  if (stored && content(*stored) != content(o.model_config))   // key order aside
    throw BadInput(fmt::format("--model-config {} differs from the config.json of the checkpoint it resumes ({})",
                               o.model_config.string(), stored->string()),
                   "drop --model-config: a resumed run takes its model from the checkpoint");
  return o.model_config;
}

namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson rope_field(const OrderedJson& config, const char* key) {
  return config.contains(key) ? config.at(key) : OrderedJson();
}

// What makes `source` compute the stored config's RoPE: its rope_scaling and rope_theta where they differ.
arch::RopeOverride stored_rope(const OrderedJson& source, const OrderedJson& stored) {
  arch::RopeOverride kept;
  if (rope_field(source, "rope_scaling") != rope_field(stored, "rope_scaling"))
    kept.scaling = rope_field(stored, "rope_scaling").dump();
  if (rope_field(source, "rope_theta") != rope_field(stored, "rope_theta"))
    kept.theta = rope_field(stored, "rope_theta").is_number() ? rope_field(stored, "rope_theta").get<double>() : 10000.0;
  return kept;
}

// --router-aux-loss-coef: the weight of the load-balancing loss, which it turns on (> 0) or off (0) whatever the
// config's output_router_logits says.
void apply_router_coefficient(double coef, const std::filesystem::path& config, arch::MoeConfig& moe) {
  if (coef < 0) return;
  if (!moe.enabled())
    throw BadInput(fmt::format("--router-aux-loss-coef {}: {} describes a model without routed experts", coef,
                               config.string()),
                   "drop --router-aux-loss-coef: only a mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE) has a router");
  moe.router_aux_loss_coef = coef;
  moe.router_loss = coef > 0;
}

}  // namespace

RunModelConfig run_model_config(const TrainOptions& o, const std::optional<std::filesystem::path>& from) {
  namespace fs = std::filesystem;
  const fs::path path = model_config_path(o, from);
  arch::RopeOverride rope = o.rope;
  const fs::path stored_path = from ? *from / checkpoint::kConfig : fs::path();
  if (from && fs::exists(stored_path)) {
    const OrderedJson stored = arch::read_model_config_file(stored_path).json;
    if (!o.rope.empty()) {
      const OrderedJson asked = arch::apply_rope_override(stored, o.rope);
      for (const char* key : {"rope_scaling", "rope_theta"})
        if (rope_field(asked, key) != rope_field(stored, key))
          throw BadInput(fmt::format("{}: the checkpoint resumed from ({}) trained with {} {}", o.rope.flags(),
                                     from->string(), key, rope_field(stored, key).dump()),
                         "drop --rope-scaling / --rope-theta: --resume keeps the checkpoint's RoPE");
    }
    rope = stored_rope(arch::read_model_config_file(path).json, stored);
  }
  arch::ModelConfigFile file = arch::read_model_config_file(path, rope);
  apply_router_coefficient(o.router_aux_loss_coef, path, file.config.moe);
  std::string text = rope.empty() ? read_small_file(path, "model config", kMaxJsonBytes) : file.json.dump(2) + "\n";
  return {path, std::move(file.config), std::move(text)};
}

std::optional<std::filesystem::path> tensorboard_dir(const TrainOptions& o) {
  if (o.tensorboard == "none") return std::nullopt;
  return o.tensorboard.empty() ? o.output / "tensorboard" : std::filesystem::path(o.tensorboard);
}

}  // namespace ulysses::train

#include "plan/memory_flags.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ulysses::plan {

void add_memory_flags(CLI::App& app, MemoryFlags& o) {
  o.precision = "auto";
  app.add_option("--precision", o.precision,
                 "auto: bf16 on a GPU, fp32 on a CPU (as the sbatch's PRECISION); fp32; bf16: the model in bf16 — "
                 "weights it computes with, activations, residual stream and kept layer inputs — over fp32 masters "
                 "and AdamW state (DeepSpeed bf16, Megatron --bf16); amp-bf16: "
                 "autocast over fp32 weights (HF Trainer bf16=True), the residual stream and kept inputs fp32: twice "
                 "bf16's activation bytes")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "amp-bf16"}))->capture_default_str();
  app.add_option("--reduce-dtype", o.reduce_dtype,
                 "The dtype gradients are summed over ranks in before they reach the fp32 masters (FSDP2's "
                 "reduce_dtype): fp32, or bf16 — half the reduce bytes, each rank's part rounded to bf16 first")
      ->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  // Kept as given ("auto" or the number), so that --print-config writes what reads back (a resolved 0 would not);
  // the number lands in attention_head_groups (kAutoHeadGroups for auto) once the check passed.
  app.add_option_function<std::string>("--attention-head-groups", [&o](const std::string& text) {
                   o.attention_head_groups = text == "auto" ? kAutoHeadGroups : std::stoll(text);
                 },
                 "Run each layer's attention in this many groups of heads (UPipe's head chunking): per group its q/k/v "
                 "projections, RoPE, all-to-alls and attention, recomputed group by group in backward, so one group's "
                 "attention activations exist at a time; each group holds whole key/value heads or lies inside one. "
                 "auto: the least G the heads allow that keeps every kernel's tensor under 2^31 elements and fits "
                 "memory at the data's length. Exact")
      ->check(CLI::Validator([](const std::string& text) -> std::string {
        if (text == "auto") return "";
        std::size_t used = 0;
        try {
          if (std::stoll(text, &used) >= 1 && used == text.size()) return "";
        } catch (const std::exception&) {
        }
        return "a number of groups (1 or more) or auto";
      }, "G|auto"))
      ->default_str(o.attention_head_groups == kAutoHeadGroups ? "auto" : std::to_string(o.attention_head_groups));
  app.add_flag("--fp32-residual", o.fp32_residual,
               "With --precision bf16: keep the residual stream (and so each kept or offloaded layer input) in fp32, "
               "as Megatron's --fp32-residual-connection; twice the bytes of those, for less rounding in the sums of "
               "the layers' outputs");
  app.add_option("--sharding", o.sharding,
                 "Split weights, gradients and AdamW state over ranks (FSDP / DeepSpeed ZeRO-3): full_shard (every "
                 "rank), hybrid_shard (each SP group; DP replicas all-reduce), no_shard; auto: full_shard when world > 1 "
                 "(with --lora-rank: no_shard unless offloading; sharded, the frozen base is split in its compute dtype)")
      ->check(CLI::IsMember({"auto", "full_shard", "hybrid_shard", "no_shard"}))->capture_default_str();
  app.add_flag("--offload-optimizer", o.offload_optimizer,
               "Keep the fp32 master shards, their gradients and AdamW state in host memory and run AdamW on the CPU "
               "(DeepSpeed's offload_optimizer); the device keeps a compute-dtype copy of its shards. Implies sharding");
  app.add_flag("--offload-params", o.offload_params,
               "Keep the compute-dtype copy of the weight shards in page-locked host memory too (DeepSpeed's "
               "offload_param): the device holds no weights but the unit running (and the next, prefetched); each "
               "unit's shard is copied over before its all-gather. Implies --offload-optimizer. Exact");
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "Keep only each decoder layer's input; recompute the layer in backward (HF gradient_checkpointing)");
  app.add_option("--offload-checkpoints", o.offload_checkpoints,
                 "Keep the first N layers' checkpointed inputs in host memory (implies --activation-checkpointing; "
                 "-1: every layer)")
      ->check(CLI::Range(std::int64_t{-1}, std::numeric_limits<std::int64_t>::max()))->capture_default_str();
  app.add_flag("--tiled-mlp", o.tiled_mlp,
               "Each layer's norm + MLP over tiles of tokens, recomputed per tile in backward (ALST's TiledMLP; exact)");
  app.add_option("--mlp-tile-tokens", o.mlp_tile_tokens, "Tokens per MLP tile (implies --tiled-mlp; 0: hidden size)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))->capture_default_str();
  app.add_flag("--tiled-logits", o.tiled_logits,
               "Head and cross-entropy over chunks of tokens: never the whole [S/P, vocab] logits (exact)");
  app.add_option("--logits-chunk-tokens", o.logits_chunk_tokens,
                 "Tokens per chunk of tiled logits (implies --tiled-logits; 0: about 1 GiB of fp32 logits)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))->capture_default_str();
  app.add_option("--prefetch", o.prefetch,
                 "Issue the next unit's weight all-gather (sharded states) and the copy back of the previous layer's "
                 "offloaded input ahead, on side streams, to overlap compute (FSDP's forward/backward prefetch); "
                 "costs one more gathered unit and layer input. auto: on for a GPU, off for a CPU. Exact either way")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  add_lora_flags(app, o);
}

namespace {

// The projections LoRA adapts, in model order: all-linear.
const std::vector<std::string>& lora_modules() {
  static const std::vector<std::string> all{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                            "down_proj"};
  return all;
}

}  // namespace

// What PEFT's LoraConfig takes, by its names.
void add_lora_flags(CLI::App& app, MemoryFlags& o) {
  app.add_option("--lora-rank", o.lora_rank,
                 "LoRA: train adapters of this rank on --lora-targets, the base weights frozen in the compute dtype "
                 "(no gradient, master or AdamW state); PEFT's r. 0: full fine-tuning")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 16))->capture_default_str();
  app.add_option("--lora-alpha", o.lora_alpha, "LoRA scale alpha / rank (PEFT's lora_alpha)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lora-targets", o.lora_targets,
                 "The projections that get adapters, by PEFT's module names (comma-separated): q_proj, k_proj, v_proj, "
                 "o_proj, gate_proj, up_proj, down_proj, or all-linear (all seven); default: PEFT's for Llama")
      ->delimiter(',')
      ->check(CLI::IsMember([] {
        std::vector<std::string> names = lora_modules();
        names.push_back("all-linear");
        return names;
      }()))
      ->default_str("q_proj,v_proj");
  app.add_option("--lora-dropout", o.lora_dropout, "Dropout on the adapters' input: 0 only (not built)")
      ->check(CLI::Validator([](const std::string& v) {
        return v == "0" || v == "0.0" ? std::string() : v + ": dropout in the adapters is not built; 0 only";
      }, "0"))
      ->capture_default_str();
  app.add_flag("--lora-rslora", o.lora_rslora, "Scale by alpha / √rank (rsLoRA, PEFT's use_rslora)");
  // A LoRA flag set beside --lora-rank 0 (the default) would be a full fine-tune that looks like LoRA: refused, on the
  // command line and in a --config file alike. "Set": other than its default — --print-config writes every LoRA key
  // at its default, and that file must read back.
  app.parse_complete_callback([&o] {
    if (o.lora_rank > 0) return;
    const MemoryFlags defaults;
    std::vector<std::string> given;
    if (o.lora_alpha != defaults.lora_alpha) given.emplace_back(fmt::format("--lora-alpha {}", o.lora_alpha));
    if (o.lora_targets != defaults.lora_targets)
      given.emplace_back(fmt::format("--lora-targets {}", fmt::join(o.lora_targets, ",")));
    if (o.lora_rslora) given.emplace_back("--lora-rslora");
    if (!given.empty())
      throw CLI::ValidationError(fmt::format("{} given with --lora-rank 0, which means a full fine-tune with no "
                                             "adapters: give --lora-rank R (PEFT's r) to train adapters, or drop {}",
                                             fmt::join(given, ", "), given.size() > 1 ? "them" : "it"));
  });
}

std::vector<std::string> lora_targets(const std::vector<std::string>& given) {
  const std::vector<std::string>& all = lora_modules();
  if (std::find(given.begin(), given.end(), "all-linear") != given.end()) return all;
  std::vector<std::string> out;
  for (const auto& name : all)   // model order, each once
    if (std::find(given.begin(), given.end(), name) != given.end()) out.push_back(name);
  return out;
}

std::string memory_args(const MemoryFlags& f) {
  std::string s;
  if (f.sharding != "auto") s += " --sharding " + f.sharding;
  if (f.offload_params) s += " --offload-params";
  else if (f.offload_optimizer) s += " --offload-optimizer";
  if (f.activation_checkpointing) s += " --activation-checkpointing";
  if (f.offload_checkpoints != 0) s += fmt::format(" --offload-checkpoints {}", f.offload_checkpoints);
  if (f.mlp_tile_tokens > 0) s += fmt::format(" --mlp-tile-tokens {}", f.mlp_tile_tokens);
  else if (f.tiled_mlp) s += " --tiled-mlp";
  if (f.logits_chunk_tokens > 0) s += fmt::format(" --logits-chunk-tokens {}", f.logits_chunk_tokens);
  else if (f.tiled_logits) s += " --tiled-logits";
  if (f.prefetch != "auto") s += " --prefetch " + f.prefetch;
  if (f.reduce_dtype != "fp32") s += " --reduce-dtype " + f.reduce_dtype;
  if (f.fp32_residual) s += " --fp32-residual";
  if (f.attention_head_groups != 1) s += " --attention-head-groups " + head_groups_name(f.attention_head_groups);
  if (f.lora_rank > 0) {
    s += fmt::format(" --lora-rank {} --lora-alpha {} --lora-targets {}", f.lora_rank, f.lora_alpha,
                     fmt::join(f.lora_targets, ","));
    if (f.lora_rslora) s += " --lora-rslora";
  }
  return s.empty() ? s : s.substr(1);
}

std::string head_groups_name(std::int64_t groups) {
  return groups == kAutoHeadGroups ? "auto" : std::to_string(groups);
}

const char* sharding_name(Sharding s) {
  return s == Sharding::kFull ? "full_shard" : s == Sharding::kHybrid ? "hybrid_shard" : "no_shard";
}

Sharding resolve_sharding(const MemoryFlags& o, int world) {
  const bool offload = o.offload_optimizer || o.offload_params;
  // LoRA: the adapters are small and the frozen base has no gradient or AdamW state, so auto keeps them replicated
  // unless an offload flag asks for shards; --sharding full_shard / hybrid_shard shard the base (for the large models)
  if (o.lora_rank > 0 && o.sharding == "auto" && !offload) return Sharding::kNone;
  if (o.sharding == "no_shard" && offload)
    throw BadInput(fmt::format("{} offloads the shards of sharded states, and --sharding is no_shard",
                               o.offload_params ? "--offload-params" : "--offload-optimizer"),
                   "drop --sharding no_shard (auto shards; at one rank it means full_shard over that rank)");
  if (o.sharding == "full_shard" || (o.sharding == "auto" && (world > 1 || offload))) return Sharding::kFull;
  return o.sharding == "hybrid_shard" ? Sharding::kHybrid : Sharding::kNone;
}

void settle_precision(MemoryFlags& flags, bool gpu) {
  if (flags.precision == "auto") flags.precision = gpu ? "bf16" : "fp32";
}

DtypePlan dtype_plan(const MemoryFlags& flags) {
  ULY_CHECK(flags.precision != "auto", "--precision auto is settled before its dtype plan");
  return dtype_plan(flags.precision, flags.fp32_residual, flags.reduce_dtype);
}

Features resolve(const MemoryFlags& o, const arch::ModelConfig& c, int world, int sp) {
  Features f;
  const DtypePlan dtypes = dtype_plan(o);
  f.bf16 = dtypes.matmuls_bf16;
  f.bf16_activations = dtypes.model_bf16;
  f.reduce_bf16 = dtypes.reduce_bf16;
  f.fp32_residual = dtypes.fp32_residual;
  ULY_CHECK(o.attention_head_groups != kAutoHeadGroups, "--attention-head-groups auto is settled before resolve");
  if (o.attention_head_groups != 1) arch::check_head_groups(c, sp, o.attention_head_groups);
  f.attention_head_groups = o.attention_head_groups;
  f.offload_optimizer = o.offload_optimizer || o.offload_params;
  f.offload_params = o.offload_params;
  f.sharding = resolve_sharding(o, world);
  f.activation_checkpointing = o.activation_checkpointing || o.offload_checkpoints != 0 || f.sharding != Sharding::kNone;
  f.offload_checkpoints = o.offload_checkpoints < 0 ? c.num_layers : std::min(o.offload_checkpoints, c.num_layers);
  f.mlp_tile_tokens = o.mlp_tile_tokens > 0 ? o.mlp_tile_tokens : o.tiled_mlp ? c.hidden_size : 0;
  f.logits_chunk_tokens = o.logits_chunk_tokens > 0 ? o.logits_chunk_tokens
                          : o.tiled_logits          ? default_logits_chunk_tokens(c.vocab_size)
                                                    : 0;
  f.prefetch = o.prefetch;
  f.heads_in_turn = o.heads_in_turn;
  f.lora_rank = o.lora_rank;
  f.lora_alpha = o.lora_alpha;
  f.lora_rslora = o.lora_rslora;
  if (o.lora_rank > 0) f.lora_targets = lora_targets(o.lora_targets);
  check_lora_on_experts(f.lora_targets, c);
  return f;
}

void check_lora_on_experts(const std::vector<std::string>& targets, const arch::ModelConfig& c) {
  if (!c.moe.enabled()) return;
  std::vector<std::string> mlp;
  for (const std::string& t : targets)
    if (t == "gate_proj" || t == "up_proj" || t == "down_proj") mlp.push_back(t);
  if (mlp.empty()) return;
  throw BadInput(fmt::format("--lora-targets {}: on a mixture of experts ({} experts) PEFT adapts every expert's "
                             "projections of those names, and adapters on experts are not built yet",
                             fmt::join(mlp, ","), c.moe.experts),
                 "adapt the attention projections: --lora-targets q_proj,k_proj,v_proj,o_proj");
}

int shard_ranks(Sharding s, int world, int sp) {
  return s == Sharding::kFull ? world : s == Sharding::kHybrid ? sp : 0;
}

std::int64_t default_logits_chunk_tokens(std::int64_t vocab, std::int64_t bytes) {
  return std::max<std::int64_t>(1, bytes / (4 * vocab));
}

}  // namespace ulysses::plan

// inspect: what a checkpoint, a consolidated checkpoint, a Hugging Face directory, a PEFT adapter directory or one
// .safetensors file holds — step, layout, config summary, LoRA adapters, files with checksums, tensors with dtype,
// shape and bytes.
#include <fmt/ranges.h>

#include "arch/layer_spec.hpp"
#include "arch/parameters.hpp"
#include "ckpt/commands.hpp"
#include "ckpt/output.hpp"
#include "core/log.hpp"
#include "ckpt/source.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {
namespace {

// The MLP: "MLP dense gated, intermediate 176" or "MLP routed, 6 experts of 32, top 3 renormalised, shared expert
// 48 (sigmoid gate)".
std::string describe(const arch::MlpSpec& m) {
  if (!m.routed()) return fmt::format("MLP dense gated, intermediate {}", m.intermediate);
  std::string s = fmt::format("MLP routed, {} experts of {}, top {}{}", m.experts, m.intermediate, m.top_k,
                              m.normalize_top_k ? " renormalised" : "");
  if (m.shared_intermediate > 0) s += fmt::format(", shared expert {} (sigmoid gate)", m.shared_intermediate);
  return s;
}

// One layer as its description (arch/layer_spec.hpp) has it: "attention 4 heads (2 kv) x 16, qkv bias, RoPE llama3
// ×8 over 8192, theta 500000; MLP dense gated, intermediate 176; RMSNorm eps 1e-05".
std::string describe(const arch::LayerSpec& l) {
  const arch::AttentionSpec& a = l.attention;
  std::string mixer = fmt::format("attention {} heads ({} kv) x {}", a.heads, a.kv_heads, a.head_dim);
  if (a.qkv_bias) mixer += ", qkv bias";
  if (a.o_bias) mixer += ", o bias";
  if (a.qk_norm) mixer += ", qk norm";
  if (a.sliding_window) mixer += fmt::format(", sliding window {}", *a.sliding_window);
  mixer += ", RoPE " + arch::rope_summary(a.rope);
  return fmt::format("{}; {}; RMSNorm eps {}", mixer, describe(l.mlp), l.input_norm.eps);
}

// The model, then its layers: one line for each run of layers that are alike ("layers 0-31: ...").
void print_spec(const arch::ModelConfig& s) {
  const std::string active = s.moe.enabled() ? fmt::format(" ({} active)", human_count(static_cast<std::uint64_t>(
                                                                 arch::active_parameter_count(s))))
                                               : "";
  fmt::print("config: {} ({}), {} parameters{}, hidden {}, {} layers, vocab {}{}\n", s.architecture, s.model_type,
             human_count(static_cast<std::uint64_t>(arch::parameter_count(s))), active, s.hidden_size, s.num_layers,
             s.vocab_size, s.tie_word_embeddings ? ", tied embeddings" : "");
  const std::vector<arch::LayerSpec> layers = arch::layer_specs(s);
  for (std::size_t first = 0, i = 1; i <= layers.size(); ++i) {
    if (i < layers.size() && describe(layers[i]) == describe(layers[first])) continue;
    const std::string which = i - first == 1 ? fmt::format("layer {}", first) : fmt::format("layers {}-{}", first, i - 1);
    fmt::print("  {}: {}\n", which, describe(layers[first]));
    first = i;
  }
}

void print_tensors(const std::string& title, const Weights& w, bool list) {
  std::uint64_t bytes = 0, params = 0;
  std::map<std::string, int> dtypes;
  for (const std::string& n : w.names()) {
    bytes += w.info(n).nbytes();
    params += w.info(n).numel();
    ++dtypes[st::dtype_name(w.info(n).dtype)];
  }
  std::vector<std::string> kinds;
  for (const auto& [d, count] : dtypes) kinds.push_back(fmt::format("{} {}", count, d));
  fmt::print("{}: {} tensors ({}), {} elements, {}\n", title, w.names().size(), fmt::join(kinds, ", "), params,
             human_bytes(bytes));
  if (!list) return;
  for (const std::string& n : w.names()) {
    const st::TensorInfo& t = w.info(n);
    fmt::print("  {:<56} {:<5} {:<16} {:>12}\n", n, st::dtype_name(t.dtype), fmt::format("[{}]", fmt::join(t.shape, ", ")),
               t.nbytes());
  }
}

int inspect_checkpoint(const InspectOptions& o, const fs::path& dir) {
  const checkpoint::Manifest m = checkpoint::read_manifest(dir);
  fmt::print("checkpoint {}\n", dir.string());
  fmt::print("format {} v{}, step {}, written at world {} = sp {} x dp {}, optimizer {}, {}\n", checkpoint::kFormatName,
             m.format_version, m.step, m.world, m.sp, m.dp, m.optimizer_layout,
             m.consolidated ? "consolidated" : "as the trainer wrote it");
  int bad = 0;
  fmt::print("files:\n");
  for (const auto& f : m.files) {
    const fs::path p = dir / f.file;
    std::string status;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) status = "MISSING";
    else if (static_cast<std::int64_t>(size) != f.bytes) status = fmt::format("SIZE {} != {}", size, f.bytes);
    else if (o.checksums) status = xxh3_file_hex(p) == f.xxh3 ? "ok" : "CHECKSUM MISMATCH";
    else status = "size ok";
    bad += status != "ok" && status != "size ok";
    fmt::print("  {:<24} {:>12} bytes  xxh3 {}  {}\n", f.file, f.bytes, f.xxh3, status);
  }
  if (bad) {
    fmt::print("{} file(s) do not match the manifest\n", bad);
    return 1;
  }
  const Checkpoint c = open_checkpoint(dir, Verify::kNone);
  print_spec(c.spec.config);
  fmt::print("trainer state: step {}, {} sequences consumed, {} tokens trained; optimizer steps {}\n", c.state.step,
             c.state.cursor, c.state.tokens_seen, c.optimizer_steps);
  if (c.lora)
    fmt::print("LoRA adapters: {}; {} holds them only, over the base {}\n", c.lora->summary(),
               c.model.path().filename().string(),
               c.lora->init_from.empty() ? "made from --seed (no --init-from)" : c.lora->init_from);
  print_tensors(c.model.path().filename().string(), c.model, o.tensors);   // sharded: "model-*-of-WWWWW..."
  print_tensors(c.optimizer.path().filename().string(), c.optimizer, false);
  return 0;
}

int inspect_hf(const InspectOptions& o, const fs::path& dir) {
  fmt::print("Hugging Face directory {}\n", dir.string());
  const arch::ModelConfigFile spec = arch::read_model_config_file(dir / "config.json");
  print_spec(spec.config);
  if (spec.json.contains("torch_dtype")) fmt::print("torch_dtype: {}\n", spec.json["torch_dtype"].dump());
  const Weights w = Weights::hf_dir(dir);
  fmt::print("files:\n");
  std::map<fs::path, int> files;
  for (const std::string& n : w.names()) ++files[w.file_of(n)];
  for (const auto& [f, count] : files)
    fmt::print("  {:<40} {:>12} bytes  {} tensors{}\n", f.filename().string(), fs::file_size(f), count,
               o.checksums ? "  xxh3 " + xxh3_file_hex(f) : "");
  print_tensors("weights", w, o.tensors);
  check_parameters(w, spec, /*f32_only=*/false, /*allow_ignorable=*/true);
  fmt::print("tensors match config.json\n");
  return 0;
}

int inspect_peft(const InspectOptions& o, const fs::path& dir) {
  fmt::print("PEFT adapter directory {}\n", dir.string());
  const nlohmann::json config = read_json_file(dir / "adapter_config.json", "a PEFT adapter_config.json is JSON");
  for (const char* key : {"peft_type", "base_model_name_or_path", "r", "lora_alpha", "use_rslora", "target_modules"})
    if (config.contains(key)) fmt::print("{}: {}\n", key, config[key].dump());
  const fs::path file = dir / "adapter_model.safetensors";
  fmt::print("file: {} ({} bytes{})\n", file.filename().string(), fs::file_size(file),
             o.checksums ? ", xxh3 " + xxh3_file_hex(file) : "");
  print_tensors("adapters", Weights::file(file), o.tensors);
  return 0;
}

}  // namespace

int run_inspect(const InspectOptions& o) {
  if (fs::is_regular_file(o.path)) {
    const Weights w = Weights::file(o.path);
    fmt::print("safetensors file {} ({} bytes{})\n", o.path.string(), fs::file_size(o.path),
               o.checksums ? ", xxh3 " + xxh3_file_hex(o.path) : "");
    for (const auto& [k, v] : w.metadata()) fmt::print("metadata {} = {}\n", k, v);
    print_tensors("tensors", w, o.tensors);
    return 0;
  }
  if (!fs::is_directory(o.path))
    throw BadInput(fmt::format("{} does not exist", o.path.string()),
                   "pass a checkpoint, a run's checkpoints/, a Hugging Face directory or a .safetensors file");
  if (const auto dir = checkpoint::find_checkpoint(o.path)) return inspect_checkpoint(o, *dir);
  if (fs::exists(o.path / "config.json")) return inspect_hf(o, o.path);
  if (fs::exists(o.path / "adapter_config.json") && fs::exists(o.path / "adapter_model.safetensors"))
    return inspect_peft(o, o.path);
  throw BadInput(fmt::format("{} is neither a checkpoint (manifest.json, latest), a Hugging Face directory "
                             "(config.json) nor a PEFT adapter directory (adapter_config.json)", o.path.string()),
                 "pass a checkpoint, a run's checkpoints/, an HF or PEFT directory or a .safetensors file");
}

}  // namespace ulysses::ckpt

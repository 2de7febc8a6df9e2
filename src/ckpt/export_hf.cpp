// export-hf: checkpoint → Hugging Face directory. The mapping is the identity on names (the trainer's
// parameters already carry transformers' names; a tied model has no lm_head.weight, as transformers
// saves it), a dtype cast per element (dtype.hpp), and a config.json with every field spelled out.
// --merge-lora: a LoRA checkpoint's adapters added to its base's weights (ckpt/lora.hpp), as PEFT merges.
// Tensors stream in kChunkBytes pieces: memory is ~3 chunks (fp32 in, converted out, hash state) however
// large the model. Everything written is read back and compared (sizes, header, per-tensor xxh3) before
// the directory is renamed into place.
#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "ckpt/commands.hpp"
#include "ckpt/dtype.hpp"
#include "ckpt/output.hpp"
#include "ckpt/source.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {
namespace {

// Files a tokenizer directory may hold that transformers' AutoTokenizer reads.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                           "tokenizer.model",    "vocab.json",            "merges.txt",
                                           "added_tokens.json",  "chat_template.jinja",   "chat_template.json"};

// Greedy: tensors in order, a new shard when the next tensor would pass max_bytes (a tensor larger than
// max_bytes gets a shard of its own, as transformers does).
std::vector<std::vector<OutTensor>> plan_shards(const std::vector<OutTensor>& tensors, std::uint64_t max_bytes) {
  std::vector<std::vector<OutTensor>> shards(1);
  std::uint64_t size = 0;
  for (const OutTensor& t : tensors) {
    if (!shards.back().empty() && size + t.nbytes() > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(t);
    size += t.nbytes();
  }
  return shards;
}

std::string shard_name(std::size_t i, std::size_t n) {
  return n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

// The tokenizer files `dir` holds (none: an empty list).
std::vector<fs::path> tokenizer_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const char* name : kTokenizerFiles)
    if (fs::is_regular_file(dir / name)) files.push_back(dir / name);
  return files;
}

std::vector<fs::path> tokenizer_files(const fs::path& dir) {
  if (!fs::is_directory(dir))
    throw BadInput(fmt::format("--tokenizer {} is not a directory", dir.string()),
                   "pass the directory of a Hugging Face tokenizer (tokenizer.json, tokenizer_config.json, ...)");
  std::vector<fs::path> files = tokenizer_files_in(dir);
  if (files.empty())
    throw BadInput(fmt::format("--tokenizer {} holds no tokenizer file (tokenizer.json, tokenizer.model, ...)",
                               dir.string()),
                   "pass the directory tokenizer.save_pretrained() wrote");
  return files;
}

// The base a LoRA checkpoint's adapters merge into: --base, else the run's --init-from; checked against config.json.
Weights lora_base(const Checkpoint& c, const fs::path& flag) {
  if (!c.lora)
    throw BadInput(fmt::format("--merge-lora: {} is a full fine-tune's checkpoint; it holds no LoRA adapters",
                               c.dir.string()),
                   "drop --merge-lora: export-hf writes the whole model");
  const fs::path dir = flag.empty() ? fs::path(c.lora->init_from) : flag;
  if (dir.empty())
    throw BadInput(fmt::format("--merge-lora: the run of {} trained its adapters over a base made from --seed (no "
                               "--init-from), which no file holds", c.dir.string()),
                   "export-peft writes the adapters alone; a base to merge into is a Hugging Face directory (--base)");
  if (!is_hf_dir(dir))
    throw BadInput(fmt::format("--merge-lora: the base {} ({}) is not a Hugging Face model directory (config.json + "
                               "model.safetensors or its index)", dir.string(), flag.empty() ? "the run's --init-from"
                                                                                              : "--base"),
                   "pass --base DIR: the folder the run's --init-from named, as it was");
  Weights w = Weights::hf_dir(dir);
  check_parameters(w, c.spec, /*f32_only=*/false, /*allow_ignorable=*/true);
  return w;
}

// Every adapted projection's tensor gains its LoRA update.
void add_lora_deltas(const Checkpoint& c, std::vector<OutTensor>& tensors) {
  for (const std::string& stem : lora_stems(c.lora->parameters(c.spec.config))) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const OutTensor& t) {
      return t.name == stem + ".weight";
    });
    ULY_CHECK(it != tensors.end(), "no weight {}.weight for its adapter", stem);
    it->delta = std::make_shared<const LoraDelta>(c.model, stem, c.lora->scale());
  }
}

}  // namespace

int run_export_hf(const ExportOptions& o) {
  const st::DType dtype = dtype_from_flag(o.dtype);
  if (o.max_shard_bytes == 0) throw BadInput("--max-shard-size must be positive", "e.g. --max-shard-size 5GB");
  // sizes, headers and shapes now; the checksums of the files we read are computed on a second thread
  // while the export runs (the page cache serves both readers) and must agree before the rename
  const Checkpoint c = open_checkpoint(o.input, Verify::kNone);
  if (!o.merge_lora) require_whole_model(c, "export-hf");
  const std::optional<Weights> base = o.merge_lora ? std::optional(lora_base(c, o.base)) : std::nullopt;
  const Weights& from = base ? *base : c.model;
  // --tokenizer's; merging LoRA, by default the base's own (the model merged into is the base, tokenizer and all)
  const std::vector<fs::path> tokenizer = !o.tokenizer.empty() ? tokenizer_files(o.tokenizer)
                                          : base && fs::is_directory(base->path()) ? tokenizer_files_in(base->path())
                                                                                   : std::vector<fs::path>{};
  std::vector<std::string> names = c.model.names();   // the checkpoint's order; a base's: its parameters only
  if (base) {
    names.clear();
    for (const arch::ParameterSpec& p : arch::parameters(c.spec.config)) names.push_back(p.name);
  }
  ExportTensors out = export_tensors(from, names, dtype);   // named, not bound: clang 14 cannot capture bindings
  std::vector<OutTensor>& tensors = out.tensors;
  const std::uint64_t total = out.total;
  if (base) add_lora_deltas(c, tensors);
  const auto shards = plan_shards(tensors, o.max_shard_bytes);
  log_info("{}: step {}, {} ({} tensors{}{}) -> {} {} in {} file{}", c.dir.string(), c.manifest.step,
           c.spec.config.architecture, tensors.size(), c.spec.config.tie_word_embeddings ? ", tied embeddings" : "",
           base ? fmt::format("; LoRA {} merged into {}", c.lora->summary(), base->path().string()) : "",
           human_bytes(total), st::dtype_name(dtype), shards.size(), shards.size() > 1 ? "s" : "");
  for (std::size_t i = 0; i < shards.size(); ++i)
    log_info("  {}/{}: {} tensors", o.output.string(), shard_name(i, shards.size()), shards[i].size());
  if (o.dry_run) return end_dry_run();

  write_export(o.output, o.overwrite, c, tensors, "export", [&](const fs::path& tmp, Progress& progress) {
    std::vector<std::vector<std::string>> sums;
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shard_name(i, shards.size());
      sums.push_back(write_tensors(tmp / name, from, shards[i], {{"format", "pt"}}, &progress, o.allow_nonfinite));
      for (const OutTensor& t : shards[i]) weight_map[t.name] = name;
    }
    progress.finish();
    if (shards.size() > 1) {
      const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      write_text(tmp / "model.safetensors.index.json", index.dump(2) + "\n");
    }
    write_text(tmp / "config.json", export_config(c.spec, torch_dtype_name(dtype)).dump(2) + "\n");
    write_text(tmp / "generation_config.json", generation_config(c.spec).dump(2) + "\n");
    for (const fs::path& f : tokenizer) copy_file_checked(f, tmp / f.filename());
    for (std::size_t i = 0; i < shards.size(); ++i) verify_tensors(tmp / shard_name(i, shards.size()), shards[i], sums[i]);
    const Weights back = Weights::hf_dir(tmp);   // the index and the shards agree
    check_parameters(back, c.spec, /*f32_only=*/false, /*allow_ignorable=*/false);
  });
  log_info("wrote {} ({} {}, {} file{}, verified){}", o.output.string(), human_bytes(total), st::dtype_name(dtype),
           shards.size(), shards.size() > 1 ? "s" : "", tokenizer.empty() ? "; no tokenizer (--tokenizer DIR)" : "");
  return 0;
}

}  // namespace ulysses::ckpt

#include "ckpt/source.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>

#include <fmt/ranges.h>

#include "ckpt/dtype.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {
namespace {


bool plain_name(const std::string& s) {
  const fs::path p(s);
  return !s.empty() && s != "." && s != ".." && p == p.filename();
}

std::string first_few(const std::vector<std::string>& v) {
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(v.size(), 3)));
  return fmt::format("{}{}", fmt::join(head, ", "), v.size() > 3 ? fmt::format(" (+{} more)", v.size() - 3) : "");
}

// The files a checkpoint is read from: replicated (layout null) or sharded.
std::vector<std::string> needed_files(const checkpoint::ShardLayout* layout) {
  std::vector<std::string> out{checkpoint::kTrainerState, checkpoint::kConfig};
  if (!layout) {
    out.insert(out.end(), {checkpoint::kModel, checkpoint::kOptimizer});
    return out;
  }
  for (const char* stem : {checkpoint::kModelStem, checkpoint::kOptimizerStem})
    for (int r = 0; r < layout->world; ++r) out.push_back(checkpoint::shard_file(stem, r, layout->world));
  return out;
}

// Every file the manifest lists: present, the size it says, the checksum it says; the ones we read listed.
void check_files(const fs::path& dir, const checkpoint::Manifest& m, const std::vector<std::string>& needed,
                 Verify verify) {
  const fs::path manifest = dir / checkpoint::kManifest;
  for (const auto& f : m.files) {
    if (!plain_name(f.file))
      throw BadInput(fmt::format("{}: file entry \"{}\" is not a plain file name", manifest.string(), f.file), checkpoint::kDamagedHint);
    const fs::path p = dir / f.file;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) throw BadInput(fmt::format("{} lists {}, which is missing", manifest.string(), p.string()), checkpoint::kDamagedHint);
    if (static_cast<std::int64_t>(size) != f.bytes)
      throw BadInput(fmt::format("{}: {} bytes, the manifest says {} (truncated or replaced?)", p.string(), size,
                                 f.bytes), checkpoint::kDamagedHint);
    if (verify == Verify::kAll) {
      const std::string h = xxh3_file_hex(p);
      if (h != f.xxh3)
        throw BadInput(fmt::format("{}: xxh3 {}, the manifest says {} (the file is corrupt)", p.string(), h, f.xxh3),
                       checkpoint::kDamagedHint);
    }
  }
  for (const std::string& need : needed)
    if (std::none_of(m.files.begin(), m.files.end(), [&](const auto& f) { return f.file == need; }))
      throw BadInput(fmt::format("{} does not list {}", manifest.string(), need), checkpoint::kDamagedHint);
}

TrainerStateSummary read_trainer_state(const fs::path& file, std::int64_t manifest_step) {
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
      !j.contains("cursor") || !j["cursor"].is_number_unsigned())
    throw BadInput(fmt::format("{}: not a trainer state (JSON with integer \"step\" and \"cursor\")", file.string()),
                   checkpoint::kDamagedHint);
  TrainerStateSummary s{j["step"].get<std::int64_t>(), j["cursor"].get<std::uint64_t>(), 0};
  if (j.contains("tokens_seen") && j["tokens_seen"].is_number_integer()) s.tokens_seen = j["tokens_seen"].get<std::int64_t>();
  if (j.contains("options")) s.options = j["options"];
  if (s.step != manifest_step)
    throw BadInput(fmt::format("{}: step {} disagrees with the manifest's step {}", file.string(), s.step, manifest_step),
                   checkpoint::kDamagedHint);
  return s;
}

// exp_avg.<p> and exp_avg_sq.<p> for every parameter p, F32 with its shape, nothing else; "steps" metadata.
std::int64_t check_optimizer(const Weights& opt, const Weights& model) {
  std::vector<std::string> problems;
  std::size_t expected = 0;
  for (const std::string& p : model.names())
    for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
      ++expected;
      const std::string name = prefix + p;
      if (!opt.contains(name)) {
        problems.push_back(name + " missing");
      } else if (opt.info(name).dtype != st::DType::kF32 || opt.info(name).shape != model.info(p).shape) {
        problems.push_back(fmt::format("{} is {} [{}], the parameter F32 [{}]", name, st::dtype_name(opt.info(name).dtype),
                                       fmt::join(opt.info(name).shape, ", "), fmt::join(model.info(p).shape, ", ")));
      }
    }
  if (problems.empty() && opt.names().size() != expected)
    problems.push_back(fmt::format("{} tensors, expected {}", opt.names().size(), expected));
  if (!problems.empty())
    throw BadInput(fmt::format("{}: optimizer state does not match the model: {}", opt.path().string(),
                               first_few(problems)), checkpoint::kDamagedHint);
  const auto it = opt.metadata().find("steps");
  std::int64_t steps = -1;
  if (it != opt.metadata().end()) {
    try {
      std::size_t used = 0;
      steps = std::stoll(it->second, &used);
      if (used != it->second.size()) steps = -1;
    } catch (const std::exception&) {
      steps = -1;
    }
  }
  if (steps < 0)
    throw BadInput(fmt::format("{}: metadata \"steps\" is missing or not a count", opt.path().string()), checkpoint::kDamagedHint);
  return steps;
}

// `w` holds exactly `expected` (names, shapes; F32 only if `f32_only`) besides the names `ignorable` accepts; else
// the error `fail` makes of the first differences.
void check_tensors(const Weights& w, const std::vector<arch::ParameterSpec>& expected_specs, bool f32_only,
                   const std::function<bool(const std::string&)>& ignorable,
                   const std::function<BadInput(const std::string&)>& fail) {
  std::vector<std::string> problems;
  std::map<std::string, bool> expected;
  for (const arch::ParameterSpec& t : expected_specs) {
    expected[t.name] = true;
    if (!w.contains(t.name)) {
      problems.push_back(fmt::format("'{}' missing", t.name));
      continue;
    }
    const st::TensorInfo& info = w.info(t.name);
    if (info.shape != t.shape)
      problems.push_back(fmt::format("'{}' has shape [{}], the config gives [{}]", t.name, fmt::join(info.shape, ", "),
                                     fmt::join(t.shape, ", ")));
    else if (f32_only ? info.dtype != st::DType::kF32 : !is_model_float(info.dtype))
      problems.push_back(fmt::format("'{}' is {}, expected {}", t.name, st::dtype_name(info.dtype),
                                     f32_only ? "F32" : "F32, BF16 or F16"));
  }
  for (const std::string& n : w.names())
    if (!expected.count(n) && !ignorable(n)) problems.push_back(fmt::format("'{}' is unexpected", n));
  if (!problems.empty()) throw fail(first_few(problems));
}

}  // namespace

// ---- Weights ----------------------------------------------------------------------------------------

Weights Weights::file(const fs::path& path) {
  Weights w;
  w.path_ = path;
  w.file_ = std::make_shared<st::Reader>(path);
  for (const st::TensorInfo& t : w.file_->tensors()) {
    w.names_.push_back(t.name);
    w.index_[t.name] = &t;
  }
  return w;
}

Weights Weights::hf_dir(const fs::path& dir) {
  Weights w;
  w.path_ = dir;
  w.dir_ = std::make_shared<st::HfWeights>(dir);
  w.names_ = w.dir_->names();
  for (const std::string& n : w.names_) w.index_[n] = &w.dir_->info(n);
  return w;
}

const st::TensorInfo& Weights::info(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    throw BadInput(fmt::format("tensor '{}' not found in {}", name, path_.string()),
                   "ulysses-ckpt inspect lists the tensors a checkpoint or model directory holds");
  return *it->second;
}

Weights Weights::sharded(const fs::path& dir, const checkpoint::ShardLayout& layout, const std::string& stem) {
  Weights w;
  w.shards_ = std::make_shared<checkpoint::ShardedTensors>(dir, layout, stem);
  w.path_ = w.shards_->pattern();
  w.names_ = w.shards_->names();
  for (const std::string& n : w.names_) w.index_[n] = w.shards_->find(n);
  return w;
}

const fs::path& Weights::file_of(const std::string& name) const {
  return file_ ? file_->path() : dir_ ? dir_->file_of(name) : path_;
}

void Weights::read_range(const std::string& name, std::uint64_t offset, std::uint64_t n, void* dst) const {
  if (file_) file_->read_range(info(name), offset, n, dst);
  else if (dir_) dir_->read_range(name, offset, n, dst);
  else shards_->read_range(info(name), offset, n, dst);
}

const std::map<std::string, std::string>& Weights::metadata() const {
  static const std::map<std::string, std::string> none;
  return file_ ? file_->metadata() : shards_ ? shards_->metadata() : none;
}

void Weights::read_f32(const std::string& name, std::uint64_t first, std::uint64_t count, float* dst,
                       std::vector<char>& scratch) const {
  const st::TensorInfo& t = info(name);
  if (!is_model_float(t.dtype))
    throw BadInput(fmt::format("{}: tensor '{}' is {}, not a floating-point weight (F32, BF16, F16)",
                               file_of(name).string(), name, st::dtype_name(t.dtype)),
                   "a model's weights are F32, BF16 or F16: check the file with ulysses-ckpt inspect");
  const std::size_t size = st::itemsize(t.dtype);
  if (t.dtype == st::DType::kF32) {
    read_range(name, first * size, count * size, dst);
    return;
  }
  scratch.resize(count * size);
  read_range(name, first * size, count * size, scratch.data());
  convert(scratch.data(), t.dtype, dst, st::DType::kF32, count);
}

// ---- Checkpoint -------------------------------------------------------------------------------------

Checkpoint open_checkpoint(const fs::path& path, Verify verify) {
  if (!fs::is_directory(path))
    throw BadInput(fmt::format("{} is not a directory", path.string()),
                   "pass a step-NNNNNNN checkpoint, a run's checkpoints/ directory or the run directory");
  const std::optional<fs::path> dir = checkpoint::find_checkpoint(path);
  if (!dir)
    throw BadInput(fmt::format("{} is not a checkpoint: no {} and no {}", path.string(), checkpoint::kManifest,
                               checkpoint::kLatest),
                   "pass a step-NNNNNNN checkpoint, a run's checkpoints/ directory or the run directory");
  Checkpoint c{*dir, checkpoint::read_manifest(*dir)};
  const fs::path manifest = *dir / checkpoint::kManifest;
  const bool sharded = c.manifest.optimizer_layout == checkpoint::kOptimizerSharded;
  if (!sharded && c.manifest.optimizer_layout != checkpoint::kOptimizerReplicated)
    throw BadInput(fmt::format("{}: optimizer_layout \"{}\" is not supported by this build (it reads \"{}\" and \"{}\")",
                               manifest.string(), c.manifest.optimizer_layout, checkpoint::kOptimizerReplicated,
                               checkpoint::kOptimizerSharded),
                   "use the ulysses-ckpt of the ulysses build that wrote the checkpoint");
  std::optional<checkpoint::ShardLayout> layout;
  if (sharded) layout = checkpoint::parse_shard_layout(c.manifest.shards, manifest);
  const std::vector<std::string> needed = needed_files(layout ? &*layout : nullptr);
  check_files(*dir, c.manifest, needed, verify);
  c.spec = arch::read_model_config_file(*dir / checkpoint::kConfig);
  if (c.spec.config.architecture != c.manifest.architecture)
    throw BadInput(fmt::format("{}: architecture {} disagrees with {} ({})", (*dir / checkpoint::kManifest).string(),
                               c.manifest.architecture, c.spec.path.string(), c.spec.config.architecture), checkpoint::kDamagedHint);
  c.model = layout ? Weights::sharded(*dir, *layout, checkpoint::kModelStem) : Weights::file(*dir / checkpoint::kModel);
  c.state = read_trainer_state(*dir / checkpoint::kTrainerState, c.manifest.step);
  c.lora = lora_run(c.state.options, *dir / checkpoint::kTrainerState);
  if (c.lora)
    check_tensors(c.model, c.lora->parameters(c.spec.config), /*f32_only=*/true,
                  [](const std::string&) { return false; },
                  [&](const std::string& problems) {
                    return BadInput(fmt::format("{} does not hold the LoRA adapters its {} gives ({}): {}",
                                                c.model.path().string(), checkpoint::kTrainerState, c.lora->summary(),
                                                problems), checkpoint::kDamagedHint);
                  });
  else
    check_parameters(c.model, c.spec, /*f32_only=*/true, /*allow_ignorable=*/false);
  c.optimizer = layout ? Weights::sharded(*dir, *layout, checkpoint::kOptimizerStem)
                       : Weights::file(*dir / checkpoint::kOptimizer);
  for (const std::string& f : needed)   // the weights' files, the config and the trainer state: not the optimizer's
    if (!f.starts_with(checkpoint::kOptimizerStem)) c.model_files.push_back(f);
  c.optimizer_steps = check_optimizer(c.optimizer, c.model);
  return c;
}

void check_parameters(const Weights& w, const arch::ModelConfigFile& spec, bool f32_only, bool allow_ignorable) {
  check_tensors(w, arch::parameters(spec.config), f32_only,
                [&](const std::string& n) { return allow_ignorable && ignorable_extra(spec.config, n); },
                [&](const std::string& problems) {
                  return BadInput(fmt::format("{} does not match {} ({}): {}", w.path().string(), spec.path.string(),
                                              spec.config.architecture, problems),
                                  "the weights and config.json come from different models");
                });
}

void require_whole_model(const Checkpoint& c, const std::string& command) {
  if (!c.lora) return;
  throw BadInput(fmt::format("{}: {} holds LoRA adapters ({} tensors: {}) and no base model, which {} needs",
                             c.dir.string(), c.model.path().filename().string(), c.model.names().size(),
                             c.lora->summary(), command),
                 "ulysses-ckpt export-peft writes the adapters for PEFT; export-hf --merge-lora merges them into the "
                 "base (docs/checkpoints.md, LoRA)");
}

void verify_checksums(const fs::path& dir, const checkpoint::Manifest& m, const std::vector<std::string>& files) {
  for (const auto& f : m.files)
    if (std::find(files.begin(), files.end(), f.file) != files.end()) checkpoint::verify_file(dir, f);
}

bool is_hf_dir(const fs::path& path) {
  return fs::exists(path / "config.json") &&
         (fs::exists(path / "model.safetensors") || fs::exists(path / "model.safetensors.index.json"));
}

}  // namespace ulysses::ckpt

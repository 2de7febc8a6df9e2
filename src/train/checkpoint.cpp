#include "train/checkpoint.hpp"

#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include <fmt/ranges.h>
#include "core/output_dir.hpp"
#include "core/replace_file.hpp"
#include "io/checkpoint_format.hpp"
#include "io/safetensors.hpp"
#include "io/sharded_checkpoint.hpp"

namespace fs = std::filesystem;

namespace ulysses::train {
namespace {


using Part = ModelStates::Part;

// The next tensor of `out`, as fp32 in host memory.
void write_f32(st::Writer& out, const torch::Tensor& t) {
  const torch::Tensor host = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  out.write_next(host.data_ptr(), static_cast<std::uint64_t>(host.numel()) * sizeof(float));
}

// Replicated states: the whole fp32 tensors of one part → one safetensors file, one tensor at a time.
void write_part(const fs::path& path, ModelStates& states, Part part, const std::map<std::string, std::string>& meta) {
  std::vector<st::Writer::Decl> decls;
  for (const auto& w : states.whole_list(part)) decls.push_back({w.name, st::DType::kF32, w.shape});
  st::Writer out(path, decls, meta);
  states.for_each_whole(part, [&](const std::string&, const torch::Tensor& t) {
    write_f32(out, t);
  });
  out.finish();
}

// Named fp32 tensors → one safetensors file.
void write_tensors(const fs::path& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                   const std::map<std::string, std::string>& meta) {
  std::vector<st::Writer::Decl> decls;
  for (const auto& [name, t] : tensors) decls.push_back({name, st::DType::kF32, t.sizes().vec()});
  st::Writer out(path, decls, meta);
  for (const auto& [name, t] : tensors) {
    write_f32(out, t);
  }
  out.finish();
}

// Sharded states: this rank's shards (when it writes one copy of them) → its model and optimizer files in
// `dir`; returns their entries (none when it writes nothing).
std::vector<checkpoint::FileEntry> write_shards(const fs::path& dir, ModelStates& states) {
  const model::ShardedStates& s = *states.sharded_states();
  if (!s.writes_checkpoint()) return {};
  std::vector<std::pair<std::string, torch::Tensor>> masters, moments;
  for (const auto& g : s.groups())
    if (g.trained) masters.emplace_back(g.name, g.master);   // LoRA's frozen base is not a trained state
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."})
    for (const auto& g : s.groups()) {
      if (!g.trained) continue;
      const auto [avg, sq] = states.optimizer().moments(g.name);
      moments.emplace_back(prefix + g.name, std::string(prefix) == "exp_avg." ? avg : sq);
    }
  const std::string model = checkpoint::shard_file(checkpoint::kModelStem, s.shard_rank(), s.world());
  const std::string optimizer = checkpoint::shard_file(checkpoint::kOptimizerStem, s.shard_rank(), s.world());
  write_tensors(dir / model, masters, {{"format", "pt"}});
  write_tensors(dir / optimizer, moments, {{"steps", std::to_string(states.optimizer().steps())}});
  return {checkpoint::file_entry(dir, model), checkpoint::file_entry(dir, optimizer)};
}

// Rank 0's temporary checkpoint directory, told to every rank.
fs::path broadcast_path(const fs::path& path, comm::Communicator& world) {
  constexpr std::int64_t kMax = 4096;
  const std::string text = path.string();
  ULY_CHECK(text.size() < kMax, "checkpoint path of {} bytes (at most {})", text.size(), kMax - 1);
  torch::Tensor bytes = torch::zeros({kMax}, torch::kUInt8);   // [kMax] NUL-terminated
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  if (world.size() > 1) world.broadcast(bytes, 0);
  return fs::path(std::string(static_cast<const char*>(bytes.data_ptr())));
}

// Every rank's file entries (at most two each), at every rank.
std::vector<checkpoint::FileEntry> gather_entries(const std::vector<checkpoint::FileEntry>& mine,
                                                  comm::Communicator& world) {
  constexpr std::int64_t kName = 64, kHash = 16, kRecord = kName + 8 + kHash, kPerRank = 2;
  torch::Tensor rec = torch::zeros({kPerRank * kRecord}, torch::kUInt8);   // [2 × (name, bytes, xxh3)]
  auto* p = static_cast<char*>(rec.data_ptr());
  ULY_CHECK(mine.size() <= kPerRank, "{} files from one rank", mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    char* r = p + kRecord * static_cast<std::int64_t>(i);
    ULY_CHECK(mine[i].file.size() < kName && mine[i].xxh3.size() == kHash, "file entry {}", mine[i].file);
    std::memcpy(r, mine[i].file.data(), mine[i].file.size());
    std::memcpy(r + kName, &mine[i].bytes, 8);
    std::memcpy(r + kName + 8, mine[i].xxh3.data(), kHash);
  }
  const torch::Tensor all = world.size() > 1 ? world.all_gather(rec) : rec;   // [world × 2 × record]
  std::vector<checkpoint::FileEntry> out;
  const auto* q = static_cast<const char*>(all.data_ptr());
  for (std::int64_t i = 0; i < all.numel() / kRecord; ++i) {
    const char* r = q + kRecord * i;
    if (r[0] == '\0') continue;
    checkpoint::FileEntry e{std::string(r), 0, std::string(r + kName + 8, kHash)};
    std::memcpy(&e.bytes, r + kName, 8);
    out.push_back(e);
  }
  return out;
}

// Every tensor of one part from `source` into the states: only the elements this rank holds are read
// (source: an st::Reader over a replicated file, or checkpoint::ShardedTensors over per-rank files).
template <typename Source>
void read_part(const Source& source, const fs::path& path, ModelStates& states, Part part) {
  for (const auto& w : states.whole_list(part)) {
    const st::TensorInfo* info = source.find(w.name);
    if (!info) throw BadInput(fmt::format("{}: tensor {} is missing", path.string(), w.name),
                              "the checkpoint was written for another model");
    if (info->dtype != st::DType::kF32 || info->shape != w.shape)
      throw BadInput(fmt::format("{}: tensor {} is {} {}, the model expects F32 {}", path.string(), w.name,
                                 st::dtype_name(info->dtype), fmt::join(info->shape, "x"), fmt::join(w.shape, "x")),
                     "the checkpoint was written for another model");
    const auto [first, count] = states.held(part, w.name);
    torch::Tensor host = torch::empty({count}, torch::kFloat32);   // [count]
    if (count > 0)
      source.read_range(*info, static_cast<std::uint64_t>(first) * sizeof(float),
                        static_cast<std::uint64_t>(count) * sizeof(float), host.data_ptr());
    states.load_held(part, w.name, host);
  }
}

std::int64_t steps_of(const std::map<std::string, std::string>& metadata, const fs::path& path) {
  const auto it = metadata.find("steps");
  if (it == metadata.end()) throw BadInput(fmt::format("{}: metadata \"steps\" is missing", path.string()),
                                           checkpoint::kDamagedHint);
  std::int64_t steps = -1;
  const char* end = it->second.data() + it->second.size();
  if (std::from_chars(it->second.data(), end, steps).ptr != end || steps < 0)
    throw BadInput(fmt::format("{}: metadata \"steps\" is \"{}\", not a step count", path.string(),
                               printable(it->second)),
                   checkpoint::kDamagedHint);
  return steps;
}


}  // namespace

TrainerState read_trainer_state(const fs::path& path) {
  const nlohmann::json ts = read_json_file(path, checkpoint::kDamagedHint);
  const auto number = [&]<typename T>(const char* key, T fallback, bool required) {
    if (!ts.is_object() || !ts.contains(key)) {
      if (required) throw BadInput(fmt::format("{}: field \"{}\" is missing", path.string(), key), checkpoint::kDamagedHint);
      return fallback;
    }
    return json_value<T>(ts.at(key), fmt::format("{}: field \"{}\"", path.string(), key), checkpoint::kDamagedHint);
  };
  TrainerState s;
  s.step = number("step", std::int64_t{0}, true);
  s.cursor = number("cursor", std::uint64_t{0}, true);
  s.tokens_seen = number("tokens_seen", std::int64_t{0}, false);
  s.options = ts.contains("options") && ts.at("options").is_object() ? ts.at("options") : nlohmann::json::object();
  if (ts.contains("data") && ts.at("data").is_object()) s.data = ts.at("data");
  return s;
}

fs::path save_checkpoint(const fs::path& root, ModelStates& states, const TrainerState& state,
                         const RankLayout& layout, const std::string& model_config, const std::string& architecture,
                         int keep_last, comm::Communicator& world) {
  const bool writer = world.rank() == 0;
  const std::string name = checkpoint::step_dir_name(state.step);
  std::optional<OutputDir> out;
  if (writer) {
    fs::create_directories(root);
    out.emplace(root / name, /*overwrite=*/true);
  }
  checkpoint::Manifest m;
  fs::path tmp = out ? out->tmp() : fs::path();
  if (states.sharded()) {   // every rank writes its own files, in parallel; nothing is gathered
    tmp = broadcast_path(tmp, world);
    m.files = gather_entries(write_shards(tmp, states), world);
    m.optimizer_layout = checkpoint::kOptimizerSharded;
    m.shards = checkpoint::to_json(states.sharded_states()->layout());
  } else if (writer) {
    write_part(tmp / checkpoint::kModel, states, Part::kWeights, {{"format", "pt"}});
    write_part(tmp / checkpoint::kOptimizer, states, Part::kOptimizer,
               {{"steps", std::to_string(states.optimizer().steps())}});
    for (const char* f : {checkpoint::kModel, checkpoint::kOptimizer})
      m.files.push_back(checkpoint::file_entry(tmp, f));
  }
  if (!writer) return {};
  nlohmann::json ts = {{"step", state.step}, {"cursor", state.cursor}, {"tokens_seen", state.tokens_seen},
                       {"options", state.options}};
  if (!state.data.is_null()) ts["data"] = state.data;
  if (const std::string why = replace_file(tmp / checkpoint::kTrainerState, ts.dump(2) + "\n"); !why.empty())
    throw std::runtime_error(fmt::format("cannot write {}: {}", (tmp / checkpoint::kTrainerState).string(), why));
  if (const std::string why = replace_file(tmp / checkpoint::kConfig, model_config); !why.empty())
    throw std::runtime_error(fmt::format("cannot write {}: {}", (tmp / checkpoint::kConfig).string(), why));
  m.step = state.step;
  m.world = layout.world();
  m.sp = layout.sp();
  m.dp = layout.dp();
  m.architecture = architecture;
  for (const char* f : {checkpoint::kTrainerState, checkpoint::kConfig})
    m.files.push_back(checkpoint::file_entry(tmp, f));
  checkpoint::write_manifest(m, tmp);
  out->commit();
  checkpoint::set_latest(root, name);
  checkpoint::prune(root, keep_last);
  return root / name;
}

TrainerState load_checkpoint(const fs::path& dir, ModelStates& states) {
  checkpoint::Manifest m = checkpoint::read_manifest(dir);
  if (m.optimizer_layout == checkpoint::kOptimizerSharded) {
    const auto shards = checkpoint::parse_shard_layout(m.shards, dir / checkpoint::kManifest);
    const checkpoint::ShardedTensors model(dir, shards, checkpoint::kModelStem),
        optimizer(dir, shards, checkpoint::kOptimizerStem);
    read_part(model, model.pattern(), states, Part::kWeights);
    const std::int64_t steps = steps_of(optimizer.metadata(), optimizer.pattern());
    read_part(optimizer, optimizer.pattern(), states, Part::kOptimizer);
    states.optimizer().set_steps(steps);
  } else if (m.optimizer_layout == checkpoint::kOptimizerReplicated) {
    const fs::path model_path = dir / checkpoint::kModel, opt_path = dir / checkpoint::kOptimizer;
    read_part(st::Reader(model_path), model_path, states, Part::kWeights);
    const st::Reader optimizer(opt_path);
    const std::int64_t steps = steps_of(optimizer.metadata(), opt_path);
    read_part(optimizer, opt_path, states, Part::kOptimizer);
    states.optimizer().set_steps(steps);
  } else {
    throw BadInput(fmt::format("{}: optimizer_layout \"{}\" is not one this build reads (\"{}\", \"{}\")",
                               (dir / checkpoint::kManifest).string(), m.optimizer_layout,
                               checkpoint::kOptimizerReplicated, checkpoint::kOptimizerSharded),
                   "resume it with the ulysses-train that wrote it, or merge it with ulysses-ckpt merge first");
  }
  TrainerState s = read_trainer_state(dir / checkpoint::kTrainerState);
  if (s.step != m.step)
    throw BadInput(fmt::format("{}: trainer state step {} disagrees with the manifest's {}", dir.string(), s.step, m.step),
                   checkpoint::kDamagedHint);
  return s;
}

}  // namespace ulysses::train

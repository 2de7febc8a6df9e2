#include "io/checkpoint_format.hpp"

#include <algorithm>
#include <iterator>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/regular_file.hpp"
#include "core/replace_file.hpp"

namespace fs = std::filesystem;

namespace ulysses::checkpoint {
namespace {

constexpr const char* kDamaged = "the checkpoint's manifest is damaged: resume from an earlier checkpoint";

template <typename T>
T field(const nlohmann::json& j, const char* key, const fs::path& file) {
  if (!j.is_object() || !j.contains(key))
    throw BadInput(fmt::format("{}: required field \"{}\" is missing", file.string(), key), kDamaged);
  if constexpr (std::is_same_v<T, nlohmann::json>) {
    return j.at(key);
  } else {
    return json_value<T>(j.at(key), fmt::format("{}: field \"{}\"", file.string(), key), kDamaged);
  }
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  if (const std::string why = replace_file(path, text); !why.empty())
    throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), why));
}

}  // namespace

nlohmann::json to_json(const Manifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) files.push_back({{"file", f.file}, {"bytes", f.bytes}, {"xxh3", f.xxh3}});
  nlohmann::json j = {{"format", kFormatName}, {"format_version", m.format_version}, {"step", m.step},
                      {"layout", {{"world", m.world}, {"sp", m.sp}, {"dp", m.dp}}}, {"architecture", m.architecture},
                      {"optimizer_layout", m.optimizer_layout}, {"consolidated", m.consolidated}, {"files", files}};
  if (!m.shards.is_null()) j["shards"] = m.shards;
  return j;
}

Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifest;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw BadInput(fmt::format("{} is not a checkpoint: {} is missing", dir.string(), kManifest),
                   "pass a step-NNNNNNN directory (or a run's checkpoints/ with --resume auto)");
  return parse_manifest(read_small_file(path, "checkpoint manifest", kMaxJsonBytes), path);
}

Manifest parse_manifest(const std::string& text, const fs::path& path) {
  const nlohmann::json j = parse_json_input(text, path.string(), "pass a checkpoint written by ulysses-train");
  if (!j.is_object()) throw BadInput(fmt::format("{}: not a JSON object", path.string()), kDamaged);
  if (field<std::string>(j, "format", path) != kFormatName)
    throw BadInput(fmt::format("{}: format is \"{}\", expected \"{}\"", path.string(), j["format"].get<std::string>(),
                               kFormatName), "pass a checkpoint directory written by ulysses-train");
  Manifest m;
  m.format_version = field<int>(j, "format_version", path);
  if (m.format_version != kFormatVersion)
    throw BadInput(fmt::format("{}: format_version {} is not supported (this build reads {})", path.string(),
                               m.format_version, kFormatVersion), "use a newer ulysses build");
  m.step = field<std::int64_t>(j, "step", path);
  const auto layout = field<nlohmann::json>(j, "layout", path);
  m.world = field<std::int64_t>(layout, "world", path);
  m.sp = field<std::int64_t>(layout, "sp", path);
  m.dp = field<std::int64_t>(layout, "dp", path);
  std::int64_t product = 0;
  if (m.step < 0 || m.sp < 1 || m.dp < 1 || __builtin_mul_overflow(m.sp, m.dp, &product) || m.world != product)
    throw BadInput(fmt::format("{}: step {} / layout world {} = sp {} x dp {} is not valid", path.string(), m.step,
                               m.world, m.sp, m.dp),
                   "the manifest is corrupt; restore it from the run's other checkpoints");
  m.architecture = field<std::string>(j, "architecture", path);
  if (j.contains("optimizer_layout")) m.optimizer_layout = field<std::string>(j, "optimizer_layout", path);
  if (j.contains("consolidated")) m.consolidated = field<bool>(j, "consolidated", path);
  if (j.contains("shards")) m.shards = j["shards"];
  const auto files = field<nlohmann::json>(j, "files", path);
  if (!files.is_array()) throw BadInput(fmt::format("{}: field \"files\" must be an array", path.string()), kDamaged);
  for (const auto& f : files) {
    m.files.push_back({field<std::string>(f, "file", path), field<std::int64_t>(f, "bytes", path),
                       field<std::string>(f, "xxh3", path)});
    check_plain_file_name(m.files.back().file, path.string());
  }
  return m;
}

void write_manifest(const Manifest& m, const fs::path& dir) {
  write_text_atomically(dir / kManifest, to_json(m).dump(2) + "\n");
}

FileEntry file_entry(const std::filesystem::path& dir, const std::string& file) {
  return {file, static_cast<std::int64_t>(std::filesystem::file_size(dir / file)), xxh3_file_hex(dir / file)};
}

std::string step_dir_name(std::int64_t step) { return fmt::format("step-{:07d}", step); }

std::optional<fs::path> latest(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kLatest, ec)) return std::nullopt;
  const std::string text = read_small_file(dir / kLatest, "checkpoint pointer", 4096);
  const std::string name = text.substr(0, text.find('\n'));
  if (name.empty()) return std::nullopt;
  check_plain_file_name(name, (dir / kLatest).string());   // "../../elsewhere" must not be followed
  const fs::path ckpt = dir / name;
  if (!fs::exists(ckpt / kManifest))
    throw BadInput(fmt::format("{} names {}, which holds no {}", (dir / kLatest).string(), name, kManifest),
                   "the checkpoint was removed by hand; point latest at a complete step-* directory");
  return ckpt;
}

std::optional<fs::path> find_checkpoint(const fs::path& path) {
  if (fs::exists(path / kManifest)) return path;
  if (path.filename() == kLatest && fs::is_regular_file(path)) return find_checkpoint(path.parent_path());
  for (const fs::path& dir : {path, path / "checkpoints"})
    if (fs::exists(dir / kLatest)) {
      if (auto named = latest(dir)) return named;
      throw BadInput(fmt::format("{} is empty", (dir / kLatest).string()),
                     "write the name of a complete step-* directory into it");
    }
  return std::nullopt;
}

void set_latest(const fs::path& dir, const std::string& name) { write_text_atomically(dir / kLatest, name + "\n"); }

std::vector<fs::path> complete_checkpoints(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("step-") && fs::exists(e.path() / kManifest, ec))
      out.push_back(e.path());
  std::sort(out.rbegin(), out.rend());   // step-NNNNNNN: the names sort as the steps do
  return out;
}

std::vector<fs::path> save_temporaries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if ((name.starts_with(".step-") && name.find(".tmp-") != std::string::npos) ||
        name.starts_with(std::string(kLatest) + ".tmp-"))
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void verify_file(const fs::path& dir, const FileEntry& f) {
  const fs::path path = dir / f.file;
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec)
    throw BadInput(fmt::format("{}: {} (the manifest lists it with {} bytes)", path.string(), ec.message(), f.bytes),
                   kDamagedHint);
  if (static_cast<std::int64_t>(bytes) != f.bytes)
    throw BadInput(fmt::format("{}: {} bytes, the manifest says {} (the file is truncated or was replaced)",
                               path.string(), bytes, f.bytes),
                   kDamagedHint);
  if (const std::string h = xxh3_file_hex(path); h != f.xxh3)
    throw BadInput(fmt::format("{}: xxh3 {}, the manifest says {} (the file is corrupt)", path.string(), h, f.xxh3),
                   kDamagedHint);
}

void prune(const fs::path& dir, int keep_last) {
  if (keep_last <= 0) return;
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().starts_with("step-")) steps.push_back(e.path());
  std::sort(steps.begin(), steps.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < steps.size(); ++i) fs::remove_all(steps[i]);
}

}  // namespace ulysses::checkpoint

// manifest.json <-> Manifest (spec: docs/data-format.md). The reader trusts nothing: every field is
// required and typed, and the first problem is a BadInput naming the file and the field. The JSON also
// carries "format": "ulysses-packed" (a constant, not a struct field) so a stray JSON file is recognised.
#include "io/manifest.hpp"

#include <fstream>
#include <type_traits>

#include <fmt/format.h>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/regular_file.hpp"
#include "core/sequence_parallel.hpp"
#include "io/shard_format.hpp"

namespace ulysses::shard {
namespace {

using nlohmann::json;

constexpr const char* kRepack = "the manifest is damaged or not ulysses-pack's: re-pack the dataset";

// j[key] as T; BadInput naming `where` and the key when it is missing or of the wrong type.
template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw BadInput(fmt::format("{}: field \"{}\" is missing", where, key), kRepack);
  return json_value<T>(j.at(key), fmt::format("{}: field \"{}\"", where, key), kRepack);
}

// j[key] as an array (or an object for stats), checked.
const json& container(const json& j, const char* key, bool array, const std::string& where) {
  if (!j.contains(key)) throw BadInput(fmt::format("{}: field \"{}\" is missing", where, key), kRepack);
  const json& v = j.at(key);
  if (array ? !v.is_array() : !v.is_object())
    throw BadInput(fmt::format("{}: field \"{}\" must be a JSON {}", where, key, array ? "array" : "object"), kRepack);
  return v;
}

json input_to_json(const ManifestInput& i) {
  return {{"path", i.path}, {"format", i.format}, {"bytes", i.bytes},
          {"xxh3", i.xxh3}, {"documents", i.documents}, {"tokens", i.tokens}};
}

json shard_to_json(const ManifestShard& s) {
  return {{"file", s.file}, {"split", s.split}, {"num_sequences", s.num_sequences}, {"bytes", s.bytes},
          {"xxh3", s.xxh3}};
}

ManifestInput input_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw BadInput(fmt::format("{}: must be a JSON object", where), kRepack);
  return {field<std::string>(j, "path", where), field<std::string>(j, "format", where),
          field<std::int64_t>(j, "bytes", where), field<std::string>(j, "xxh3", where),
          field<std::int64_t>(j, "documents", where), field<std::int64_t>(j, "tokens", where)};
}

ManifestShard shard_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw BadInput(fmt::format("{}: must be a JSON object", where), kRepack);
  ManifestShard s{field<std::string>(j, "file", where), field<std::string>(j, "split", where),
                  field<std::int64_t>(j, "num_sequences", where), field<std::int64_t>(j, "bytes", where),
                  field<std::string>(j, "xxh3", where)};
  check_plain_file_name(s.file, where);
  if (s.split != "train" && s.split != "valid")
    throw BadInput(fmt::format("{}: split is \"{}\", not \"train\" or \"valid\"", where, printable(s.split)), kRepack);
  return s;
}

// The format magic and version, before any other field is trusted.
void check_format(const json& j, const std::string& where) {
  if (!j.is_object()) throw BadInput(fmt::format("{}: must be a JSON object", where), kRepack);
  const auto format = field<std::string>(j, "format", where);
  if (format != kFormatName)
    throw BadInput(fmt::format("{}: format is \"{}\", not \"{}\"", where, printable(format), kFormatName),
                   "pass a dataset directory made by ulysses-pack");
  const auto version = field<std::int64_t>(j, "format_version", where);
  if (version != kFormatVersion)
    throw BadInput(fmt::format("{}: format_version is {}; this reader reads version {}", where, version,
                               kFormatVersion),
                   version > kFormatVersion ? "use a newer ulysses toolkit" : "re-pack the dataset");
}

void check_sizes(const Manifest& m, const std::string& where) {
  const std::optional<std::int64_t> unit = split_unit(m.sp, m.alignment);
  if (m.seq_len <= 0 || !unit || m.seq_len % *unit != 0)
    throw BadInput(fmt::format("{}: seq_len ({}) must be a positive multiple of sp ({}) × alignment ({})", where,
                               m.seq_len, m.sp, m.alignment),
                   kRepack);
}

}  // namespace

std::int64_t Manifest::num_sequences(const std::string& split) const {
  std::int64_t n = 0;
  for (const ManifestShard& s : shards)
    if (s.split == split) n += s.num_sequences;
  return n;
}

nlohmann::json to_json(const Manifest& m) {
  json inputs = json::array(), shards = json::array();
  for (const ManifestInput& i : m.inputs) inputs.push_back(input_to_json(i));
  for (const ManifestShard& s : m.shards) shards.push_back(shard_to_json(s));
  json out = {{"format", kFormatName}, {"format_version", m.format_version}, {"seq_len", m.seq_len},
              {"sp", m.sp}, {"alignment", m.alignment}, {"pad_id", m.pad_id}, {"vocab_size", m.vocab_size},
              {"max_token_id", m.max_token_id}, {"has_loss_mask", m.has_loss_mask}, {"policy", m.policy},
              {"seed", m.seed}, {"command", m.command}, {"created_by", m.created_by}, {"inputs", inputs},
              {"shards", shards}, {"stats", m.stats}};
  if (m.sp_ring > 1) out["sp_ring"] = m.sp_ring;   // what the data was packed for; absent: 1
  if (!m.tokenizer.file.empty())
    out["tokenizer"] = {{"file", m.tokenizer.file}, {"xxh3", m.tokenizer.xxh3}, {"eos_id", m.tokenizer.eos_id},
                        {"add_special_tokens", m.tokenizer.add_special_tokens}};
  return out;
}

Manifest manifest_from_json(const nlohmann::json& j, const std::string& where) {
  check_format(j, where);
  Manifest m;
  m.format_version = static_cast<int>(field<std::int64_t>(j, "format_version", where));
  m.seq_len = field<std::int64_t>(j, "seq_len", where);
  m.sp = field<std::int64_t>(j, "sp", where);
  m.alignment = field<std::int64_t>(j, "alignment", where);
  if (j.contains("sp_ring")) m.sp_ring = field<std::int64_t>(j, "sp_ring", where);
  if (m.sp_ring < 1 || m.sp % m.sp_ring != 0)
    throw BadInput(fmt::format("{}: sp_ring ({}) must be a positive divisor of sp ({})", where, m.sp_ring, m.sp),
                   kRepack);
  m.pad_id = field<std::int64_t>(j, "pad_id", where);
  m.vocab_size = field<std::int64_t>(j, "vocab_size", where);
  m.max_token_id = field<std::int64_t>(j, "max_token_id", where);
  m.has_loss_mask = field<bool>(j, "has_loss_mask", where);
  m.policy = field<std::string>(j, "policy", where);
  m.seed = field<std::uint64_t>(j, "seed", where);
  m.command = field<std::string>(j, "command", where);
  m.created_by = field<std::string>(j, "created_by", where);
  check_sizes(m, where);
  const json& inputs = container(j, "inputs", true, where);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    m.inputs.push_back(input_from_json(inputs[i], fmt::format("{}: inputs[{}]", where, i)));
  const json& shards = container(j, "shards", true, where);
  for (std::size_t i = 0; i < shards.size(); ++i)
    m.shards.push_back(shard_from_json(shards[i], fmt::format("{}: shards[{}]", where, i)));
  m.stats = container(j, "stats", false, where);
  if (j.contains("tokenizer")) {
    const json& t = container(j, "tokenizer", false, where);
    const std::string at = where + ": tokenizer";
    m.tokenizer = {field<std::string>(t, "file", at), field<std::string>(t, "xxh3", at),
                   field<std::int64_t>(t, "eos_id", at),
                   !t.contains("add_special_tokens") || field<bool>(t, "add_special_tokens", at)};
  }
  return m;
}

void write_manifest(const Manifest& m, const std::filesystem::path& path) {
  std::ofstream out(path);
  out << to_json(m).dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

std::string shard_mismatch(const ShardParams& p, const Manifest& m) {
  if (p.seq_len == m.seq_len && p.sp == m.sp && p.alignment == m.alignment && p.pad_id == m.pad_id &&
      p.has_loss_mask == m.has_loss_mask)
    return "";
  return fmt::format("parameters (seq_len {}, sp {}, alignment {}, pad_id {}, mask {}) differ from the manifest's "
                     "(seq_len {}, sp {}, alignment {}, pad_id {}, mask {})", p.seq_len, p.sp, p.alignment, p.pad_id,
                     p.has_loss_mask, m.seq_len, m.sp, m.alignment, m.pad_id, m.has_loss_mask);
}

Manifest read_manifest(const std::filesystem::path& dataset_dir) {
  namespace fs = std::filesystem;
  const fs::path path = dataset_dir / "manifest.json";
  const std::string make = fmt::format("make one with `ulysses-pack pack CORPUS -o {} --seq-len N` (docs/data-format.md)",
                                       dataset_dir.string());
  std::error_code ec;
  if (!fs::exists(dataset_dir, ec))
    throw BadInput(fmt::format("{} does not exist: a packed dataset is a folder ulysses-pack wrote",
                               dataset_dir.string()), make);
  if (!fs::is_directory(dataset_dir, ec))
    throw BadInput(fmt::format("{} is a file, not a packed dataset (a folder ulysses-pack wrote, with manifest.json "
                               "and shards)", dataset_dir.string()),
                   fmt::format("pack it first: `ulysses-pack pack {} -o DIR --seq-len N` (docs/data-format.md)",
                               dataset_dir.string()));
  if (!fs::exists(path, ec))
    throw BadInput(fmt::format("{} is missing: {} is not a packed dataset (a folder ulysses-pack wrote)",
                               path.string(), dataset_dir.string()), make);
  return manifest_from_json(read_json_file(path, "pass a dataset directory made by ulysses-pack (re-pack a damaged one)"),
                            path.string());
}

nlohmann::json data_identity(const Manifest& m) {
  std::string listed;   // "split num_sequences xxh3\n" per shard, in manifest order
  for (const ManifestShard& s : m.shards) listed += fmt::format("{} {} {}\n", s.split, s.num_sequences, s.xxh3);
  return {{"seq_len", m.seq_len},
          {"train_sequences", m.num_sequences("train")},
          {"valid_sequences", m.num_sequences("valid")},
          {"shards", m.shards.size()},
          {"xxh3", xxh3_hex(listed.data(), listed.size())}};
}

}  // namespace ulysses::shard

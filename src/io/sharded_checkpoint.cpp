#include "io/sharded_checkpoint.hpp"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "io/checkpoint_format.hpp"

namespace fs = std::filesystem;

namespace ulysses::checkpoint {
namespace {

constexpr int kMaxWorld = 1 << 20;

template <typename T>
T get(const nlohmann::json& j, const char* key, const fs::path& where) {
  if (!j.is_object() || !j.contains(key))
    throw BadInput(fmt::format("{}: \"shards\" lacks field \"{}\"", where.string(), key), kDamagedHint);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw BadInput(fmt::format("{}: \"shards\" field \"{}\" has the wrong type", where.string(), key), kDamagedHint);
  }
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape, const std::string& name, const fs::path& where) {
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw BadInput(fmt::format("{}: parameter {} has shape [{}]", where.string(), name, fmt::join(shape, ", ")),
                     kDamagedHint);
  return n;
}

std::vector<std::string> prefixes(const std::string& stem) {
  if (stem == kModelStem) return {""};
  return {"exp_avg.", "exp_avg_sq."};
}

}  // namespace

nlohmann::json to_json(const ShardLayout& l) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : l.groups) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : g.parameters) params.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
    groups.push_back({{"name", g.name}, {"numel", g.numel}, {"shard_numel", g.shard_numel}, {"parameters", params}});
  }
  return {{"world", l.world}, {"groups", groups}};
}

ShardLayout parse_shard_layout(const nlohmann::json& j, const fs::path& where) {
  ShardLayout l;
  l.world = get<int>(j, "world", where);
  if (l.world < 1 || l.world > kMaxWorld)
    throw BadInput(fmt::format("{}: shards world {} is not in [1, {}]", where.string(), l.world, kMaxWorld), kDamagedHint);
  const auto groups = get<nlohmann::json>(j, "groups", where);
  if (!groups.is_array())
    throw BadInput(fmt::format("{}: shards \"groups\" must be an array", where.string()), kDamagedHint);
  std::set<std::string> seen;
  for (const auto& gj : groups) {
    ShardLayout::Group g{get<std::string>(gj, "name", where), get<std::int64_t>(gj, "numel", where),
                         get<std::int64_t>(gj, "shard_numel", where), {}};
    std::int64_t next = 0;
    for (const auto& pj : get<nlohmann::json>(gj, "parameters", where)) {
      ShardLayout::Parameter p{get<std::string>(pj, "name", where), get<std::vector<std::int64_t>>(pj, "shape", where),
                               get<std::int64_t>(pj, "offset", where)};
      if (p.offset != next || !seen.insert(p.name).second)
        throw BadInput(fmt::format("{}: parameter {} of group {} is at offset {} (expected {}) or named twice",
                                   where.string(), p.name, g.name, p.offset, next), kDamagedHint);
      next += numel_of(p.shape, p.name, where);
      g.parameters.push_back(std::move(p));
    }
    if (g.name.empty() || next != g.numel || g.shard_numel != (g.numel + l.world - 1) / l.world)
      throw BadInput(fmt::format("{}: group \"{}\" has numel {} for parameters of {} elements and shard_numel {} "
                                 "over {} ranks (expected ceil(numel / world))",
                                 where.string(), g.name, g.numel, next, g.shard_numel, l.world), kDamagedHint);
    l.groups.push_back(std::move(g));
  }
  return l;
}

std::string shard_file(const std::string& stem, int rank, int world) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, rank, world);
}

ShardedTensors::ShardedTensors(const fs::path& dir, const ShardLayout& layout, const std::string& stem)
    : dir_(dir), stem_(stem), world_(layout.world) {
  for (int r = 0; r < world_; ++r) {
    const fs::path path = dir / shard_file(stem, r, world_);
    if (!fs::exists(path))
      throw BadInput(fmt::format("{}: shard file {} of {} is missing", dir.string(), path.filename().string(), world_),
                     "a sharded checkpoint needs every rank's file; copy the whole step directory");
    files_.emplace_back(path);
  }
  for (const std::string& prefix : prefixes(stem))
    for (const auto& g : layout.groups) {
      const std::string tensor = prefix + g.name;
      for (const st::Reader& f : files_) {
        const st::TensorInfo* t = f.find(tensor);
        if (!t || t->dtype != st::DType::kF32 || t->shape != std::vector<std::int64_t>{g.shard_numel})
          throw BadInput(fmt::format("{}: tensor {} is {}, the manifest says F32 [{}]", f.path().string(), tensor,
                                     t ? fmt::format("{} [{}]", st::dtype_name(t->dtype), fmt::join(t->shape, ", "))
                                       : std::string("missing"),
                                     g.shard_numel), kDamagedHint);
      }
      for (const auto& p : g.parameters) {
        const std::string name = prefix + p.name;
        const auto bytes = static_cast<std::uint64_t>(numel_of(p.shape, p.name, dir)) * sizeof(float);
        infos_[name] = {name, st::DType::kF32, p.shape, 0, bytes};
        where_[name] = {tensor, p.offset, g.shard_numel};
        names_.push_back(name);
      }
    }
}

const st::TensorInfo* ShardedTensors::find(const std::string& name) const {
  auto it = infos_.find(name);
  return it == infos_.end() ? nullptr : &it->second;
}

void ShardedTensors::read_range(const st::TensorInfo& t, std::uint64_t offset, std::uint64_t n, void* dst) const {
  const Where& w = where_.at(t.name);
  ULY_CHECK(offset % sizeof(float) == 0 && n % sizeof(float) == 0 && offset + n <= t.nbytes(),
            "{}: bytes [{}, {}) of a {}-byte F32 tensor", t.name, offset, offset + n, t.nbytes());
  auto flat = w.offset + static_cast<std::int64_t>(offset / sizeof(float));   // first element in the group
  auto left = static_cast<std::int64_t>(n / sizeof(float));
  auto* out = static_cast<char*>(dst);
  while (left > 0) {
    const std::int64_t rank = flat / w.shard_numel, within = flat - rank * w.shard_numel;
    const std::int64_t take = std::min(left, w.shard_numel - within);
    const st::Reader& f = files_[static_cast<std::size_t>(rank)];
    f.read_range(*f.find(w.tensor), static_cast<std::uint64_t>(within) * sizeof(float),
                 static_cast<std::uint64_t>(take) * sizeof(float), out);
    out += take * static_cast<std::int64_t>(sizeof(float));
    flat += take;
    left -= take;
  }
}

fs::path ShardedTensors::pattern() const { return dir_ / fmt::format("{}-*-of-{:05d}.safetensors", stem_, world_); }

}  // namespace ulysses::checkpoint

#include "plan/state_layout.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"

namespace ulysses::plan {
namespace {

std::string unit_of(const std::string& name) {
  static const std::string layers = "model.layers.";
  if (name.starts_with("model.embed_tokens.")) return "model.embed_tokens";
  if (name.starts_with(layers)) return name.substr(0, name.find('.', layers.size()));
  return "head";   // model.norm.*, lm_head.*
}

}  // namespace

std::int64_t Parameter::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

StateLayout state_layout(const std::vector<Parameter>& params) {
  StateLayout l;
  std::map<std::string, int> group_index;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    const Parameter& p = params[i];
    const std::string unit = unit_of(p.name);
    const bool matrix = p.shape.size() == 2 && unit != "model.embed_tokens";
    const std::string group = unit + (p.trained ? "." : ".frozen_") + (matrix ? "matrices" : "others");
    if (l.units.empty() || l.units.back().name != unit) {
      ULY_CHECK(std::none_of(l.units.begin(), l.units.end(), [&](const auto& u) { return u.name == unit; }),
                "parameter {} of unit {} comes after another unit's", p.name, unit);
      l.units.push_back({unit, {}, {}});
    }
    auto [it, added] = group_index.emplace(group, static_cast<int>(l.groups.size()));
    if (added) {
      l.groups.push_back({group, matrix, p.shape.size() >= 2, p.trained, 0, {}});
      l.units.back().groups.push_back(it->second);
    }
    StateLayout::Group& g = l.groups[it->second];
    ULY_CHECK(g.decay == (p.shape.size() >= 2), "group {} would mix decayed and undecayed parameters ({})", group,
              p.name);
    l.places.push_back({it->second, g.numel});
    g.numel += p.numel();
    g.params.push_back(i);
    l.units.back().params.push_back(i);
  }
  return l;
}

std::vector<Parameter> parameters_of(const arch::ModelConfig& c, std::int64_t lora_rank,
                                     const std::vector<std::string>& lora_targets) {
  const std::vector<arch::ParameterSpec> adapters =
      lora_rank > 0 ? arch::lora_parameters(c, lora_rank, lora_targets) : std::vector<arch::ParameterSpec>{};
  const std::vector<arch::ParameterSpec> base = arch::parameters(c);
  const auto module_of = [](const std::string& name) { return name.substr(0, name.rfind('.')); };
  std::vector<Parameter> out;
  for (std::size_t i = 0; i < base.size(); ++i) {
    out.push_back({base[i].name, base[i].shape, adapters.empty()});
    const std::string module = module_of(base[i].name);
    if (i + 1 < base.size() && module_of(base[i + 1].name) == module) continue;
    for (const auto& a : adapters)   // registered under their projection, after its own weight and bias
      if (a.name.starts_with(module + ".lora_")) out.push_back({a.name, a.shape, true});
  }
  return out;
}

ShardSize shard_size(const StateLayout& layout, int world, GatherBytes bytes) {
  ShardSize size;
  for (const auto& g : layout.groups) {
    const std::int64_t n = (g.numel + world - 1) / world;
    if (!g.trained) {
      size.frozen_bytes += n * (g.matrix ? bytes.matrices : bytes.others);
      continue;
    }
    size.elements += n;
    size.compute_copy_bytes += n * (g.matrix ? bytes.matrices : bytes.others);
  }
  return size;
}

UnitSize largest_unit(const StateLayout& layout, bool tied_embeddings, GatherBytes bytes) {
  auto size_of = [&](const StateLayout::Unit& u) {
    UnitSize s;
    for (int gi : u.groups) {
      const auto& g = layout.groups[gi];
      s.gathered_bytes += g.numel * (g.matrix ? bytes.matrices : bytes.others);
      if (g.trained) s.elements += g.numel;   // a frozen group gets no gradient
    }
    return s;
  };
  UnitSize largest, embed;
  for (const auto& u : layout.units) {
    UnitSize s = size_of(u);
    if (u.name == "model.embed_tokens") embed = s;
    if (u.name == "head" && tied_embeddings) s = {s.gathered_bytes + embed.gathered_bytes, s.elements + embed.elements};
    if (s.gathered_bytes + 4 * s.elements > largest.gathered_bytes + 4 * largest.elements)
      largest = {s.gathered_bytes, s.elements, largest.layer_gathered_bytes};
    if (u.name.rfind("model.layers.", 0) == 0)
      largest.layer_gathered_bytes = std::max(largest.layer_gathered_bytes, s.gathered_bytes);
  }
  return largest;
}

StatePlan plan_states(const std::vector<Parameter>& params, int shards, Offload offload, GatherBytes bytes) {
  ShardSize size;
  if (shards > 0) size = shard_size(state_layout(params), shards, bytes);
  else
    for (const Parameter& p : params)
      if (p.trained) size.elements += p.numel();
  const StateBytes fp32{4 * size.elements, 4 * size.elements, 8 * size.elements};   // weights, grads, two moments
  // the frozen shards are the gather-dtype copies' kind: on the device, or in host memory with the parameters
  if (offload.params) return {{}, fp32, size.compute_copy_bytes + size.frozen_bytes};
  if (offload.optimizer) return {{size.compute_copy_bytes + size.frozen_bytes, 0, 0}, fp32};
  return {{fp32.weights + size.frozen_bytes, fp32.grads, fp32.optimizer}, {}};
}

}  // namespace ulysses::plan

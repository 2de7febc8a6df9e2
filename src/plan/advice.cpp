#include "plan/advice.hpp"

#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/sequence_parallel.hpp"
#include "plan/tensor_limit.hpp"

namespace ulysses::plan {
namespace {

bool head_groups_allowed(const arch::ModelConfig& c, int sp, std::int64_t groups) {
  const std::vector<std::int64_t> valid = arch::valid_head_groups(c, sp);
  return std::find(valid.begin(), valid.end(), groups) != valid.end();
}

// The memory plan of settled flags fits and no kernel's tensor passes the limit.
bool fits_settled(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags, const Profile& p,
                  const Machine& m, std::int64_t seq_len) {
  const Features f = resolve(flags, c, l.world(), l.ulysses());
  if (p.limits_tensors && past_tensor_limit(c, l, f, seq_len)) return false;
  return check_fit(predict(c, l, f, p, seq_len), l, m).fits;
}

// Settled flags that fit: as they are, or (--prefetch auto) with the head groups in turn; nullopt when neither does.
std::optional<MemoryFlags> fitting(const arch::ModelConfig& c, const Layout& l, MemoryFlags f, const Profile& p,
                                   const Machine& m, std::int64_t seq_len) {
  f.heads_in_turn = false;
  if (fits_settled(c, l, f, p, m, seq_len)) return f;
  if (f.prefetch != "auto" || f.attention_head_groups <= 1) return std::nullopt;
  f.heads_in_turn = true;
  if (fits_settled(c, l, f, p, m, seq_len)) return f;
  return std::nullopt;
}

bool fits(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags, const Profile& p, const Machine& m,
          std::int64_t seq_len) {
  if (seq_len % sequence_unit(l.sp, l.ring) != 0) return false;
  const MemoryFlags settled = settle_head_groups(c, l, flags, p, m, seq_len);
  if (!head_groups_allowed(c, l.ulysses(), settled.attention_head_groups)) return false;
  return fits_settled(c, l, settled, p, m, seq_len);
}

}  // namespace

MemoryFlags settle_head_groups(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                               const Profile& p, const Machine& m, std::int64_t seq_len) {
  // the least memory at every length (and where none fits): the head groups in turn where --prefetch auto lets them
  const auto least = [](MemoryFlags f) {
    f.heads_in_turn = f.prefetch == "auto" && f.attention_head_groups > 1;
    return f;
  };
  if (flags.attention_head_groups != kAutoHeadGroups) {
    if (flags.attention_head_groups == 1) return flags;
    return seq_len <= 0 ? least(flags) : fitting(c, l, flags, p, m, seq_len).value_or(least(flags));
  }
  const std::vector<std::int64_t> valid = arch::valid_head_groups(c, l.ulysses());
  MemoryFlags f = flags;
  f.attention_head_groups = valid.empty() ? 1 : valid.back();   // none: the heads do not split (refused elsewhere)
  if (valid.empty() || seq_len <= 0) return least(f);
  for (const std::int64_t g : valid) {
    f.attention_head_groups = g;
    if (p.limits_tensors && past_tensor_limit(c, l, resolve(f, c, l.world(), l.ulysses()), seq_len)) continue;
    if (const auto fit = fitting(c, l, f, p, m, seq_len)) return *fit;
  }
  f.attention_head_groups = valid.back();   // the most groups: the least memory and the smallest tensors
  return least(f);   // nothing fits: the refusal says what the least memory needs
}

std::vector<int> valid_sp_degrees(const arch::ModelConfig& c, int world) {
  std::vector<int> out;
  for (int sp = 1; sp <= world; ++sp) {
    if (world % sp != 0) continue;
    try {
      arch::check_heads_for_sp(c, sp, "");
      out.push_back(sp);
    } catch (const BadInput&) {
    }
  }
  return out;
}

namespace {

struct Change {
  std::string flag;
  std::function<void(MemoryFlags&)> apply;
};

// The memory changes in the order advice tries them (advice.hpp)
const std::vector<Change>& memory_changes() {
  static const std::vector<Change> changes = {
      {"--sharding full_shard", [](MemoryFlags& f) { f.sharding = "full_shard"; }},
      {"--offload-optimizer", [](MemoryFlags& f) { f.offload_optimizer = true; }},
      {"--activation-checkpointing", [](MemoryFlags& f) { f.activation_checkpointing = true; }},
      {"--tiled-mlp", [](MemoryFlags& f) { f.tiled_mlp = true; }},
      {"--tiled-logits", [](MemoryFlags& f) { f.tiled_logits = true; }},
      {"--offload-checkpoints -1", [](MemoryFlags& f) { f.offload_checkpoints = -1; }},
      {"--attention-head-groups auto", [](MemoryFlags& f) { f.attention_head_groups = kAutoHeadGroups; }},
      {"--offload-params", [](MemoryFlags& f) { f.offload_params = true; }},
  };
  return changes;
}

// `change` applied to `flags`, when it is allowed and changes what runs (the memory features resolved at S)
std::optional<MemoryFlags> changed(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                   const Change& change, const Profile& p, const Machine& m, std::int64_t seq_len) {
  MemoryFlags f = flags;
  change.apply(f);
  if (f.sharding == "no_shard" && (f.offload_optimizer || f.offload_params)) return std::nullopt;
  const Features now = resolve(settle_head_groups(c, l, flags, p, m, seq_len), c, l.world(), l.ulysses());
  const Features next = resolve(settle_head_groups(c, l, f, p, m, seq_len), c, l.world(), l.ulysses());
  const bool same = next.sharding == now.sharding && next.offload_optimizer == now.offload_optimizer &&
                    next.offload_params == now.offload_params &&
                    next.attention_head_groups == now.attention_head_groups &&
                    next.activation_checkpointing == now.activation_checkpointing &&
                    next.mlp_tile_tokens == now.mlp_tile_tokens &&
                    next.logits_chunk_tokens == now.logits_chunk_tokens &&
                    next.offload_checkpoints == now.offload_checkpoints;
  return same ? std::nullopt : std::optional(f);
}

// "--a --b 3 --c" -> {"--a", "--b 3", "--c"}: each flag with its value
std::vector<std::string> flag_words(const std::string& args) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < args.size()) {
    const std::size_t next = args.find(" --", at);
    out.push_back(args.substr(at, next == std::string::npos ? std::string::npos : next - at));
    at = next == std::string::npos ? args.size() : next + 1;
  }
  return out;
}

}  // namespace

std::vector<int> sp_degrees(const arch::ModelConfig& c, const Layout& l) {
  std::vector<int> out;
  for (const int sp : valid_sp_degrees(c, l.world()))
    if (l.sp_within_islands(sp)) out.push_back(sp);
  return out;
}

std::vector<SpRing> sp_ring_degrees(const arch::ModelConfig& c, const Layout& l) {
  std::vector<SpRing> out;
  for (int sp = 1; sp <= l.world(); ++sp)
    for (int ring = 1; ring <= sp && l.world() % sp == 0; ++ring) {
      if (sp % ring != 0) continue;
      try {
        arch::check_heads_for_sp(c, sp, "", ring);
      } catch (const BadInput&) {
        continue;
      }
      Layout at = l;
      at.sp = sp, at.ring = ring;
      if (at.sp_within_islands(sp)) out.push_back({sp, ring});
    }
  return out;
}

void check_sp_for_length(const arch::ModelConfig& c, int world, int sp, std::int64_t seq_len,
                         const std::string& source, int ring) {
  if (sp < 1) return;
  if (seq_len % sp == 0) {
    if (ring > 1) check_ring_split(seq_len, sp, ring, source);
    return;
  }
  std::vector<int> degrees;
  for (const int d : valid_sp_degrees(c, world))
    if (seq_len % d == 0) degrees.push_back(d);
  throw BadInput(fmt::format("{} holds sequences of {} tokens, which do not split over --sp {}", source, seq_len, sp),
                 degrees.empty()
                     ? fmt::format("re-pack with ulysses-pack pack … --sp {} (a length that splits)", sp)
                     : fmt::format("use --sp {} (what the model's heads, {} ranks and S allow), or re-pack with "
                                   "ulysses-pack pack … --sp {}", fmt::join(degrees, ", "), world, sp));
}

void check_sp_for_world(const arch::ModelConfig& c, int world, int sp) {
  if (sp < 1 || world < 1 || world % sp == 0) return;
  throw BadInput(fmt::format("world size ({}) is not divisible by --sp ({})", world, sp),
                 fmt::format("launch a multiple of {} ranks, or use --sp {} (what the model's heads and {} ranks "
                             "allow)", sp, fmt::join(valid_sp_degrees(c, world), ", "), world));
}

std::optional<MemoryFlags> choose_memory_flags(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                               const Profile& p, const Machine& m, std::int64_t seq_len) {
  MemoryFlags f = flags;
  for (const Change& ch : memory_changes()) {
    if (fits(c, l, f, p, m, seq_len)) return f;
    if (auto next = changed(c, l, f, ch, p, m, seq_len)) f = *next;
  }
  return fits(c, l, f, p, m, seq_len) ? std::optional(f) : std::nullopt;
}

std::optional<std::string> suggest_fix(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                       const Profile& p, const Machine& m, std::int64_t seq_len) {
  for (const Change& ch : memory_changes()) {
    const auto f = changed(c, l, flags, ch, p, m, seq_len);
    if (f && fits(c, l, *f, p, m, seq_len)) return "add " + ch.flag;
  }
  if (const auto chosen = choose_memory_flags(c, l, flags, p, m, seq_len)) {   // several flags together
    std::string added;
    const std::string given = " " + memory_args(flags) + " ";
    for (const std::string& flag : flag_words(memory_args(*chosen)))
      if (given.find(" " + flag + " ") == std::string::npos) added += " " + flag;
    return "add" + added;
  }
  for (int sp : sp_degrees(c, l)) {
    Layout bigger = l;
    bigger.sp = sp;
    if (sp > l.sp && fits(c, bigger, flags, p, m, seq_len)) return fmt::format("use --sp {}", sp);
  }
  for (int nodes = l.nodes + 1; nodes <= 16 * l.nodes; ++nodes) {
    Layout more = l;
    more.nodes = nodes;
    for (int sp : sp_degrees(c, more)) {
      more.sp = sp;
      if (sp >= l.sp && fits(c, more, flags, p, m, seq_len))
        return fmt::format("use {} nodes in all with --sp {} ({} ranks, {} a node)", nodes, sp, more.world(),
                           l.ranks_per_node);
    }
  }
  return std::nullopt;
}

namespace {

// "SP 16" or "SP 16 (Ulysses 8 × ring 2)"
std::string layout_words(const Layout& l) {
  if (l.ring == 1) return fmt::format("SP {}", l.sp);
  return fmt::format("SP {} (Ulysses {} × ring {})", l.sp, l.ulysses(), l.ring);
}

}  // namespace

std::optional<Choice> choose_layout(const arch::ModelConfig& c, const Layout& l, const MemoryFlags& flags,
                                    const Profile& p, const Machine& m, std::int64_t target, bool fewest_gpus,
                                    bool choose_flags) {
  for (int nodes = fewest_gpus ? 1 : l.nodes; nodes <= l.nodes; ++nodes) {
    Layout at = l;
    at.nodes = nodes;
    std::vector<int> tried;   // SP degrees no ring degree fits
    for (const SpRing& d : sp_ring_degrees(c, at)) {
      if (tried.empty() || tried.back() != d.sp) tried.push_back(d.sp);
      at.sp = d.sp, at.ring = d.ring;
      const std::int64_t unit = sequence_unit(d.sp, d.ring), s = (target + unit - 1) / unit * unit;
      const std::optional<MemoryFlags> with = choose_flags              ? choose_memory_flags(c, at, flags, p, m, s)
                                              : fits(c, at, flags, p, m, s) ? std::optional(flags)
                                                                            : std::nullopt;
      if (!with) continue;
      tried.pop_back();   // the degree that fits
      const std::string smaller =
          (tried.empty() ? "" : fmt::format("; SP {} does not fit", fmt::join(tried, ", "))) +
          (choose_flags ? std::string(tried.empty() ? "" : " with any memory flags") : "");
      return Choice{at, *with, fewest_gpus
                            ? fmt::format("{} GPUs ({} node{}) is the fewest that reach {} tokens, with {} the "
                                          "smallest layout that fits there{}",
                                          at.world(), nodes, nodes == 1 ? "" : "s", target, layout_words(at), smaller)
                            : fmt::format("{} is the smallest layout that fits {} tokens on all {} GPUs: the rest "
                                          "is data parallelism (DP {}), which needs no all-to-all{}",
                                          layout_words(at), target, at.world(), at.world() / d.sp, smaller)};
    }
  }
  return std::nullopt;
}

}  // namespace ulysses::plan

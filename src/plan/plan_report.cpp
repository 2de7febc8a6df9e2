#include "plan/plan_report.hpp"

#include <map>

#include <fmt/format.h>

#include "core/log.hpp"

namespace ulysses::plan {
namespace {

std::string size(std::int64_t b) { return human_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(b, 0))); }

std::string verdict(std::int64_t need, std::int64_t of, const Machine& m) {
  const std::int64_t usable = m.usable(of);
  return fmt::format("{} usable ({:.0f}% of {}{}): {}", size(usable), 100 * kUsableFraction, size(of),
                     m.headroom > 0 ? fmt::format(", less {:.0f}% headroom", 100 * m.headroom) : "",
                     need <= usable ? "fits" : "DOES NOT FIT");
}

// What a line of the plan holds, in a clause (docs/planning.md#the-model-of-memory has the arithmetic).
std::string what(const std::string& label) {
  static const std::map<std::string, std::string> clauses = {
      {"gathered units", "a sharded layer gathered whole to run, its gradient, the next one when prefetched"},
      {"saved activations", "what forward keeps for backward: each layer's input when checkpointing"},
      {"one layer's working set", "one layer's attention and MLP intermediates, alive while it recomputes and "
                                  "back-propagates"},
      {"loss chunk", "one chunk's logits and their gradient"},
      {"communication buffers", "the all-to-alls' send and receive buffers"},
      {"offloaded model states", "fp32 masters, gradients and AdamW moments in host memory"},
      {"offloaded layer inputs", "checkpointed layer inputs kept in page-locked host memory"}};
  const auto it = clauses.find(label);
  return it == clauses.end() ? "" : "   " + it->second;
}

}  // namespace

std::vector<std::string> breakdown_lines(const Breakdown& b, const Layout& l, const Machine& m) {
  std::vector<std::string> out;
  out.push_back(m.cuda ? "device memory per rank (GPU; the arithmetic: docs/planning.md#the-model-of-memory):"
                       : "memory per rank (the host is the device; docs/planning.md#the-model-of-memory):");
  for (const auto& [label, bytes] : b.device_lines())
    if (bytes > 0) out.push_back(fmt::format("  {:<32} {:>12}{}", label, size(bytes), what(label)));
  std::int64_t rank_total = b.device();
  if (m.cuda) {
    out.push_back(fmt::format("  {:<32} {:>12}   of {}", "total", size(b.device()),
                              verdict(b.device(), m.device_bytes, m)));
    out.push_back("host memory per rank:");
    rank_total = 0;
  }
  for (const auto& [label, bytes] : b.host_lines())
    if (bytes > 0) out.push_back(fmt::format("  {:<32} {:>12}{}", label, size(bytes), what(label)));
  rank_total += b.host();
  out.push_back(fmt::format("  {:<32} {:>12}", "total", size(rank_total)));
  out.push_back(fmt::format("host memory per node ({} rank{}): {} of {}", l.ranks_per_node,
                            l.ranks_per_node == 1 ? "" : "s", size(rank_total * l.ranks_per_node),
                            verdict(rank_total * l.ranks_per_node, m.host_bytes, m)));
  return out;
}

std::string features_line(const Features& f, const arch::ModelConfig& c, const Layout& l) {
  std::string s = f.bf16_activations ? "bf16" : f.bf16 ? "amp-bf16 (autocast over fp32)" : "fp32";
  if (f.fp32_residual) s += " with an fp32 residual stream";
  if (f.reduce_bf16) s += ", gradients reduced in bf16";
  const int shards = shard_ranks(f.sharding, l.world(), l.sp);
  s += shards > 0 ? fmt::format("; {} over {} rank{}", sharding_name(f.sharding), shards, shards == 1 ? "" : "s")
                  : "; no_shard (replicated states)";
  if (f.offload_optimizer) s += f.offload_params ? "; optimizer and parameters offloaded" : "; optimizer offloaded";
  if (f.activation_checkpointing)
    s += f.offload_checkpoints > 0 ? fmt::format("; checkpointing ({} of {} layer inputs in host memory)",
                                                 f.offload_checkpoints, c.num_layers)
                                   : "; checkpointing";
  if (f.attention_head_groups > 1)
    s += fmt::format("; attention in {} head groups{}", f.attention_head_groups, f.heads_in_turn ? ", in turn" : "");
  if (f.mlp_tile_tokens > 0) s += fmt::format("; TiledMLP ({}-token tiles)", f.mlp_tile_tokens);
  if (f.logits_chunk_tokens > 0) s += fmt::format("; tiled logits ({}-token chunks)", f.logits_chunk_tokens);
  return s;
}

}  // namespace ulysses::plan

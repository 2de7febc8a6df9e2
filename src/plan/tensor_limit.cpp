#include "plan/tensor_limit.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "arch/layer_spec.hpp"

#include "core/error.hpp"

namespace ulysses::plan {

std::vector<KernelTensor> kernel_tensors(const arch::ModelConfig& c, const Layout& l, const Features& f,
                                         std::int64_t seq_len) {
  const std::int64_t B = l.micro_batch, S = seq_len, T = B * (S / l.sp);
  std::int64_t q = 0, intermediate = 0;   // the widest layer's: one head group's q per token of the rank, the MLP's
  bool window = false;
  for (const arch::LayerSpec& layer : arch::layer_specs(c)) {
    const arch::AttentionSpec& a = layer.attention;
    q = std::max(q, a.heads / f.attention_head_groups / l.ulysses() * a.head_dim);   // query heads: rank, group
    intermediate = std::max(intermediate, layer.mlp.intermediate);
    window = window || a.sliding_window.has_value();
  }
  const std::int64_t block = S / l.ring;   // tokens attention sees at once: the whole sequence, or a ring block
  std::vector<KernelTensor> out{
      {"q of one head group after the all-to-all [B, S/R, H/G/U, head_dim]", B * block * q,
       "raise --attention-head-groups (auto takes the least that keeps it under) or --sp"},
      {"MLP tile [rows, intermediate]", f.mlp_rows(T) * intermediate,
       "--mlp-tile-tokens N (or --tiled-mlp: tiles of hidden tokens)"},
      {"logits chunk [rows, vocab]", f.logit_rows(T) * c.vocab_size,
       "--logits-chunk-tokens N (or --tiled-logits: about 1 GiB of fp32 logits a chunk)"},
      {"embedding gradient [vocab, hidden]", c.vocab_size * c.hidden_size, "a model this wide is past these kernels"}};
  if (window && l.ring == 1)   // a ring masks each piece of its own
    out.push_back({"sliding-window mask [B, 1, S, S]", B * S * S, "a shorter --seq-len"});
  return out;
}

std::optional<KernelTensor> past_tensor_limit(const arch::ModelConfig& c, const Layout& l, const Features& f,
                                              std::int64_t seq_len) {
  std::optional<KernelTensor> worst;
  for (KernelTensor& t : kernel_tensors(c, l, f, seq_len))
    if (t.elements > kMaxTensorElements && (!worst || t.elements > worst->elements)) worst = std::move(t);
  return worst;
}

void check_tensor_limit(const arch::ModelConfig& c, const Layout& l, const Features& f, std::int64_t seq_len) {
  const auto t = past_tensor_limit(c, l, f, seq_len);
  if (!t) return;
  throw BadInput(fmt::format("at S = {} (SP {}, micro-batch {}, {} head group{}) the {} would have {} elements, past "
                             "the {} (2^31 - 1) a kernel with 32-bit indexing takes",
                             seq_len, l.sp, l.micro_batch, f.attention_head_groups,
                             f.attention_head_groups == 1 ? "" : "s", t->name, t->elements, kMaxTensorElements),
                 t->fix);
}

}  // namespace ulysses::plan

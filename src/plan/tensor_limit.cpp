#include "plan/tensor_limit.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::plan {

std::vector<KernelTensor> kernel_tensors(const arch::ModelConfig& c, const Layout& l, const Features& f,
                                         std::int64_t seq_len) {
  const std::int64_t B = l.micro_batch, S = seq_len, T = B * (S / l.sp);
  const std::int64_t group_heads = c.num_heads / f.attention_head_groups / l.ulysses();   // query heads: rank, group
  const std::int64_t block = S / l.ring;   // tokens attention sees at once: the whole sequence, or a ring block
  std::vector<KernelTensor> out{
      {"q of one head group after the all-to-all [B, S/R, H/G/U, head_dim]", B * block * group_heads * c.head_dim,
       "raise --attention-head-groups (auto takes the least that keeps it under) or --sp"},
      {"MLP tile [rows, intermediate]", f.mlp_rows(T) * c.intermediate_size,
       "--mlp-tile-tokens N (or --tiled-mlp: tiles of hidden tokens)"},
      {"logits chunk [rows, vocab]", f.logit_rows(T) * c.vocab_size,
       "--logits-chunk-tokens N (or --tiled-logits: about 1 GiB of fp32 logits a chunk)"},
      {"embedding gradient [vocab, hidden]", c.vocab_size * c.hidden_size, "a model this wide is past these kernels"}};
  if (c.sliding_window && l.ring == 1)   // a ring masks each piece of its own
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

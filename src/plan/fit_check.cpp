#include "plan/fit_check.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "plan/advice.hpp"
#include "plan/host_memory.hpp"
#include "plan/tensor_limit.hpp"

namespace ulysses::plan {

MemoryPlan check_memory_fits(const arch::ModelConfig& c, const MemoryFlags& flags, const Layout& layout,
                             const RankDevice& device, const std::string& profile, std::int64_t seq_len,
                             bool refuse) {
  const HostMemory host = host_memory();
  MemoryPlan m{layout,
               {device.cuda, device.cuda ? device.memory_bytes : 0, host.bytes},
               load_profile(profile.empty() ? default_profile_name(device.cuda, device.name) : profile),
               {},
               {}};
  m.features = resolve(settle_head_groups(c, layout, flags, m.profile, m.machine, seq_len), c, layout.world(),
                       layout.ulysses());
  m.breakdown = predict(c, layout, m.features, m.profile, seq_len);
  const Fit fit = check_fit(m.breakdown, layout, m.machine);
  if (fit.fits || !refuse) {   // a tensor past the limit is refused either way (memory first: its advice covers both)
    if (m.profile.limits_tensors) check_tensor_limit(c, layout, m.features, seq_len);
    if (fit.fits) return m;
  }
  const auto fix = suggest_fix(c, layout, flags, m.profile, m.machine, seq_len);
  auto size = [](std::int64_t b) { return human_bytes(static_cast<std::uint64_t>(b)); };
  const std::string where =
      fit.limit == "device" ? fmt::format("per GPU ({})", device.name)
                            : fmt::format("on this node ({} rank{} × {}; node memory from {})", layout.ranks_per_node,
                                          layout.ranks_per_node == 1 ? "" : "s",
                                          size(fit.need / layout.ranks_per_node), host.source);
  const BadInput refusal(
      fmt::format("the memory plan at S = {} needs {} {}, more than the {} usable ({:.0f}% of {}; model states {}, "
                  "activations and loss {}; profile {})",
                  seq_len, size(fit.need), where, size(fit.have), 100 * kUsableFraction,
                  size(static_cast<std::int64_t>(static_cast<double>(fit.have) / kUsableFraction)),
                  size(m.breakdown.weights + m.breakdown.gradients + m.breakdown.optimizer + m.breakdown.host_states),
                  size(m.breakdown.saved + m.breakdown.working + m.breakdown.loss + m.breakdown.host_checkpoints),
                  m.profile.name),
      fix ? fmt::format("{} (ulysses-plan shows the whole plan)", *fix)
          : "use more ranks or nodes, a shorter sequence or a smaller model (ulysses-plan shows the whole plan)");
  if (refuse) throw refusal;
  m.unfit = one_line(refusal);
  return m;
}

}  // namespace ulysses::plan

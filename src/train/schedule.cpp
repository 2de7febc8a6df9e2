#include "train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace ulysses::train {

double Schedule::lr_at(std::int64_t step) const {
  if (warmup > 0 && step <= warmup) return peak * static_cast<double>(step) / static_cast<double>(warmup);
  if (decay == Decay::kConstant || total <= warmup) return peak;
  // After warmup, transformers' factor at step - 1 (what its scheduler applies to the step-th optimizer step): the
  // first step after warmup — step 1 without warmup — runs at the peak.
  const double progress =
      std::clamp(static_cast<double>(step - 1 - warmup) / static_cast<double>(total - warmup), 0.0, 1.0);
  const double shape = decay == Decay::kCosine ? 0.5 * (1 + std::cos(std::numbers::pi * progress)) : 1 - progress;
  return peak * (min_ratio + (1 - min_ratio) * shape);
}

Decay decay_from_name(const std::string& name) {
  if (name == "cosine") return Decay::kCosine;
  if (name == "linear") return Decay::kLinear;
  if (name == "constant") return Decay::kConstant;
  throw BadInput(fmt::format("--lr-decay {} is not a schedule", name), "use cosine, linear or constant");
}

}  // namespace ulysses::train

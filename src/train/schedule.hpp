// Learning-rate schedule: linear warmup from 0 to peak over `warmup` steps, then cosine or linear decay
// to peak × min_ratio at `total` steps (constant: stays at peak). Step numbers count from 1.
#pragma once

#include <cstdint>
#include <string>

namespace ulysses::train {

enum class Decay { kCosine, kLinear, kConstant };

struct Schedule {
  double peak = 3e-4;
  double min_ratio = 0.1;
  std::int64_t warmup = 0;
  std::int64_t total = 1;
  Decay decay = Decay::kCosine;

  double lr_at(std::int64_t step) const;
};

Decay decay_from_name(const std::string& name);   // "cosine" | "linear" | "constant"

}  // namespace ulysses::train

// Calibration: the profile's factors and fixed cost fitted to measured peaks (torch-free arithmetic; the
// measuring is ulysses-train --calibrate-memory, train/calibrate.cpp).
//
// Four feature sets, each run at two (or more) lengths on one rank (SP 1, replicated states):
//   all           activation checkpointing + TiledMLP + tiled logits   (the layer working set, the fixed cost)
//   whole-logits  checkpointing + TiledMLP, the whole logits           (+ the loss)
//   untiled-mlp   checkpointing, the MLP untiled, tiled logits         (+ the MLP's intermediates)
//   plain         no checkpointing, no TiledMLP, tiled logits          (+ every layer's saved intermediates)
// The model peak = fixed + exact(S) + work·W(S) + loss·Lo(S) + saved·Sv(S) + mlp·M(S) is linear in the five
// unknowns; W, Lo, Sv, M and exact come from predict() itself, so the fit and the plan use one formula. Least
// squares over all points (at least 8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_config.hpp"
#include "plan/memory_flags.hpp"
#include "plan/profile.hpp"

namespace ulysses::plan {

enum class CalibrationSet { kAll, kWholeLogits, kUntiledMlp, kPlain };
const char* calibration_set_name(CalibrationSet s);
inline constexpr CalibrationSet kCalibrationSets[] = {CalibrationSet::kAll, CalibrationSet::kWholeLogits,
                                                      CalibrationSet::kUntiledMlp, CalibrationSet::kPlain};
// The flags of one set (--precision `precision`; loss chunks of `chunk` tokens where tiled).
MemoryFlags calibration_flags(CalibrationSet s, const std::string& precision, std::int64_t chunk);

struct Measurement {
  CalibrationSet set;
  std::int64_t seq_len = 0;
  std::int64_t peak = 0;   // bytes: the device allocator's peak (CUDA) or the process's peak RSS (CPU)
};

// `base` gives the name, source, cuda and checkpoint_bytes; the factors and the fixed cost (device_fixed on
// CUDA, host_fixed on CPU) are fitted. BadInput when the points cannot determine them.
Profile fit_profile(const arch::ModelConfig& c, const std::vector<Measurement>& points, const std::string& precision,
                    std::int64_t chunk, Profile base);

}  // namespace ulysses::plan

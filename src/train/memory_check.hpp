// The refusal before anything is built: a run whose memory plan (plan/memory_model.hpp: model states, gathered
// units, activations, loss chunk, buffers, fixed costs) does not fit ends every rank with exit 2 and one line
// naming the numbers and the flag that would make it fit (plan/advice.hpp). --dry-run makes the same check and
// builds no model either.
//
// The machine is this rank's: on CUDA its GPU's memory, and the node's host memory shared by the ranks on it;
// on CPU the host is the device. Host memory is the cgroup limit where one is set, else MemTotal. The profile is
// --memory-profile (a calibration file or a built-in name), else the built-in one for the device.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

#include "plan/memory_model.hpp"

namespace ulysses::train {

struct MemoryPlan {
  plan::Layout layout;
  plan::Machine machine;
  plan::Profile profile;
  plan::Breakdown breakdown;
};

// BadInput when the plan does not fit (see above).
MemoryPlan check_memory_fits(const arch::ModelConfig& c, const plan::MemoryFlags& flags, const plan::Layout& layout,
                             const c10::Device& device, const std::string& profile, std::int64_t seq_len);

}  // namespace ulysses::train

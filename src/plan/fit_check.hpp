// The refusal before anything is built, torch-free: a run whose memory plan (plan/memory_model.hpp: model states,
// gathered units, activations, loss chunk, buffers, fixed costs) does not fit is BadInput, one line naming the
// numbers and the flag that would make it fit (plan/advice.hpp). ulysses-train checks it twice with the same
// arithmetic: its front (train/front.cpp) before LibTorch is loaded, where the device is certainly the CPU, and
// its core (train/trainer.cpp) once the device is known; --dry-run makes the same check and builds no model.
//
// The machine is this rank's: on CUDA its GPU's memory, and the node's host memory shared by the ranks on it;
// on CPU the host is the device. Host memory is the cgroup limit where one is set, else MemTotal. The profile is
// the one named (a calibration file or a built-in name), else the built-in one for the device.
#pragma once

#include <cstdint>
#include <string>

#include "arch/model_config.hpp"
#include "plan/memory_model.hpp"

namespace ulysses::plan {

struct RankDevice {
  bool cuda = false;
  std::string name;                  // "cpu", or the GPU's name ("NVIDIA H100 80GB HBM3")
  std::int64_t memory_bytes = 0;     // one GPU's memory (cuda)
};

struct MemoryPlan {
  Layout layout;
  Machine machine;
  Profile profile;
  Features features;   // the flags resolved, --attention-head-groups auto settled at this length and machine
  Breakdown breakdown;
  std::string unfit;   // refuse = false: the refusal's line (its hint too) when the plan does not fit, else empty
};

// BadInput when the plan does not fit (see above), or with refuse = false (ulysses-train --ignore-memory-plan) the
// plan with that line in `unfit`; BadInput either way when a kernel's tensor would pass 2^31 elements (a crash, not
// a plan: tensor_limit.hpp). `profile`: a name or file, "" for the device's default.
MemoryPlan check_memory_fits(const arch::ModelConfig& c, const MemoryFlags& flags, const Layout& layout,
                             const RankDevice& device, const std::string& profile, std::int64_t seq_len,
                             bool refuse = true);

}  // namespace ulysses::plan

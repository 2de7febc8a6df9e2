// A memory profile: the constants that turn the planner's element counts into bytes for one device kind and
// its kernels (memory_model.hpp says where each is used). Built-in profiles are documented with their sources
// in docs/planning.md; a calibrated one is a small JSON file written by `ulysses-train --calibrate-memory`:
//   {"profile": "NVIDIA H100 80GB HBM3 bf16", "source": "...", "saved_factor": 1.2, "work_factor": 0.9,
//    "mlp_factor": 0.8, "loss_factor": 2.1, "device_fixed": 123, "host_fixed": 456, "checkpoint_bytes": 0,
//    "measurements": [{"features": "all", "seq_len": 1024, "peak": 789}, ...]}
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::plan {

struct Profile {
  std::string name;            // "cpu", "h100", "alst-h100", or the calibrated device
  std::string source;          // where the numbers come from, one line
  bool counted = false;        // the factors are counted, not measured (ulysses-plan keeps --headroom auto free)
  bool cuda = false;           // a GPU's profile (device memory apart from host memory)
  double saved_factor = 1.0;   // bytes saved by a layer in the plain path / counted elements × dtype bytes
  double work_factor = 1.0;    // one layer's forward + backward working set, attention side / counted
  double mlp_factor = 1.0;     // the MLP's intermediates (gate, up, act, act·up per row), saved or working / counted
  double loss_factor = 1.0;    // the loss chunk's bytes / (rows × V × 4)
  std::int64_t device_fixed = 0;   // device bytes of a rank beyond what is counted (context, allocator, NCCL)
  std::int64_t host_fixed = 0;     // host bytes of a rank's process (runtime, libraries, MPI)
  // Bytes per hidden element of a kept layer input where the profile models another stack (alst-h100: 2); 0 for
  // ours: the residual stream's dtype, counted from the precision (4 in fp32 and amp-bf16, 2 in bf16).
  int checkpoint_bytes = 0;
  int offload_bytes = 16;          // host bytes per offloaded parameter (ours: fp32 master, gradient, 2 moments)
  // The 2^31-element rule (tensor_limit.hpp) bounds the lengths: ours. alst-h100 models a stack whose measured
  // limits pass it (2.4M tokens on 8 GPUs without TiledMLP: a 4.3e9-element MLP intermediate per rank).
  bool limits_tensors = true;
  nlohmann::json measurements = nlohmann::json::array();   // a calibration's points, kept for the record
};

std::vector<std::string> builtin_profile_names();
// A built-in name, or the path of a calibration file. BadInput naming the file or listing the names.
Profile load_profile(const std::string& name_or_path);
void write_profile(const std::filesystem::path& path, const Profile& p);
// The built-in profile for a device: "cpu" for the host, "h100"/"h200" by the GPU's name (else "h100").
std::string default_profile_name(bool cuda, const std::string& device_name);

}  // namespace ulysses::plan

#include "plan/profile.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/replace_file.hpp"

namespace ulysses::plan {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// The built-in constants; docs/planning.md gives each one's source.
std::vector<Profile> builtins() {
  const Profile cpu{.name = "cpu",
                    .source = "measured on the CI machine (2-core x86-64, 24 GiB, LibTorch 2.11 CPU, fp32, glibc malloc "
                              "defaults) by ulysses-train --calibrate-memory --calibrate-lengths 2048,8192 on "
                              "tools/bench/memory_bench.py's model, 2026-11-25; docs/planning.md",
                    .cuda = false,
                    .saved_factor = 0.151, .work_factor = 0.816, .mlp_factor = 1.529, .loss_factor = 2.647,
                    .device_fixed = 0, .host_fixed = 599 * kMiB, .checkpoint_bytes = 0,
                    .offload_bytes = 16};
  const Profile h100{.name = "h100",
                     .source = "counted (factors 1.0), not yet measured on a GPU: run ulysses-train --calibrate-memory "
                               "there; docs/planning.md",
                     .counted = true,
                     .cuda = true,
                     .saved_factor = 1.0, .work_factor = 1.0, .mlp_factor = 1.0, .loss_factor = 1.0,
                     .device_fixed = 2048 * kMiB, .host_fixed = 6144 * kMiB, .checkpoint_bytes = 0,
                     .offload_bytes = 16};
  Profile h200 = h100;
  h200.name = "h200";
  const Profile alst{.name = "alst-h100",
                     .source = "ALST's stack (DeepSpeed ZeRO-3 + offload, Liger, FlashAttention 2) approximated: bf16 "
                               "layer inputs, work 0.6, MLP 0.3, loss 3.0, 24 host bytes per offloaded parameter, "
                               "fitted to its limits (arXiv 2506.13996 Tables 1-4, ArcticTraining recipes); "
                               "docs/planning.md",
                     .cuda = true,
                     .saved_factor = 1.0, .work_factor = 0.6, .mlp_factor = 0.3, .loss_factor = 3.0,
                     .device_fixed = 2048 * kMiB, .host_fixed = 6144 * kMiB, .checkpoint_bytes = 2,
                     .offload_bytes = 24, .limits_tensors = false};
  return {cpu, h100, h200, alst};
}

Profile from_json(const nlohmann::json& j, const std::string& file) {
  Profile p;
  try {
    const std::string hint = "write one with ulysses-train --calibrate-memory FILE";
    auto get = [&]<typename T>(const char* key, T& out) { out = json_value<T>(j.at(key), file + ": " + key, hint); };
    get("profile", p.name);
    p.source = j.contains("source") ? json_value<std::string>(j["source"], file + ": source", hint)
                                    : "calibration file " + file;
    get("cuda", p.cuda);
    get("saved_factor", p.saved_factor);
    get("work_factor", p.work_factor);
    get("mlp_factor", p.mlp_factor);
    get("loss_factor", p.loss_factor);
    get("device_fixed", p.device_fixed);
    get("host_fixed", p.host_fixed);
    if (j.contains("checkpoint_bytes")) get("checkpoint_bytes", p.checkpoint_bytes);
    get("offload_bytes", p.offload_bytes);
    p.measurements = j.value("measurements", nlohmann::json::array());
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(fmt::format("{}: not a memory profile ({})", file, e.what()),
                   "write one with ulysses-train --calibrate-memory FILE, or name a built-in profile");
  }
  for (double f : {p.saved_factor, p.work_factor, p.mlp_factor, p.loss_factor})
    if (!(f > 0 && f < 1000))
      throw BadInput(fmt::format("{}: a factor of {} is not plausible (0 < factor < 1000)", file, f),
                     "calibrate again: ulysses-train --calibrate-memory FILE");
  return p;
}

}  // namespace

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : builtins()) names.push_back(p.name);
  return names;
}

Profile load_profile(const std::string& name_or_path) {
  for (const auto& p : builtins())
    if (p.name == name_or_path) return p;
  std::error_code ec;
  if (!std::filesystem::exists(name_or_path, ec))
    throw BadInput(fmt::format("memory profile \"{}\" is neither a built-in profile nor a readable file", name_or_path),
                   fmt::format("built-in: {}; or a file from ulysses-train --calibrate-memory",
                               fmt::join(builtin_profile_names(), ", ")));
  return from_json(read_json_file(name_or_path, "write one with ulysses-train --calibrate-memory FILE"), name_or_path);
}

void write_profile(const std::filesystem::path& path, const Profile& p) {
  const nlohmann::json j = {{"profile", p.name},           {"source", p.source},
                            {"cuda", p.cuda},              {"saved_factor", p.saved_factor},
                            {"work_factor", p.work_factor}, {"mlp_factor", p.mlp_factor},
                            {"loss_factor", p.loss_factor},
                            {"device_fixed", p.device_fixed}, {"host_fixed", p.host_fixed},
                            {"checkpoint_bytes", p.checkpoint_bytes}, {"offload_bytes", p.offload_bytes},
                            {"measurements", p.measurements}};
  if (const std::string why = replace_file(path, j.dump(2) + "\n"); !why.empty())
    throw BadInput(fmt::format("cannot write {}: {}", path.string(), why), "check the directory exists and is writable");
}

std::string default_profile_name(bool cuda, const std::string& device_name) {
  if (!cuda) return "cpu";
  return device_name.find("H200") != std::string::npos ? "h200" : "h100";
}

}  // namespace ulysses::plan

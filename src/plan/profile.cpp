#include "plan/profile.hpp"

#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ulysses::plan {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// The built-in constants; docs/planning.md gives each one's source.
std::vector<Profile> builtins() {
  Profile cpu{"cpu", "measured on the CI machine (2-core x86-64, 24 GiB, LibTorch 2.11 CPU, fp32, glibc malloc "
                     "defaults) by ulysses-train --calibrate-memory --calibrate-lengths 2048,8192 on "
                     "tools/bench/memory_bench.py's model, 2026-11-25; docs/planning.md",
              false, 0.728, 1.636, 2.612, 0, 555 * kMiB, 4};
  Profile h100{"h100", "counted (factors 1.0), not yet measured on a GPU: run ulysses-train --calibrate-memory there; "
                       "docs/planning.md",
               true, 1.0, 1.0, 1.0, 2048 * kMiB, 6144 * kMiB, 4};
  Profile h200 = h100;
  h200.name = "h200";
  Profile alst{"alst-h100", "ALST's stack approximated (bf16 layer inputs: 2 bytes per hidden element; work factor "
                            "0.65 fitted to its Llama-3.1-8B 3.7M on 8 H100, arXiv 2506.13996 Table 3); docs/planning.md",
               true, 1.0, 0.65, 1.0, 2048 * kMiB, 6144 * kMiB, 2};
  return {cpu, h100, h200, alst};
}

Profile from_json(const nlohmann::json& j, const std::string& file) {
  Profile p;
  try {
    p.name = j.at("profile").get<std::string>();
    p.source = j.value("source", "calibration file " + file);
    p.cuda = j.at("cuda").get<bool>();
    p.saved_factor = j.at("saved_factor").get<double>();
    p.work_factor = j.at("work_factor").get<double>();
    p.loss_factor = j.at("loss_factor").get<double>();
    p.device_fixed = j.at("device_fixed").get<std::int64_t>();
    p.host_fixed = j.at("host_fixed").get<std::int64_t>();
    p.checkpoint_bytes = j.at("checkpoint_bytes").get<int>();
    p.measurements = j.value("measurements", nlohmann::json::array());
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(fmt::format("{}: not a memory profile ({})", file, e.what()),
                   "write one with ulysses-train --calibrate-memory FILE, or name a built-in profile");
  }
  for (double f : {p.saved_factor, p.work_factor, p.loss_factor})
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
  std::ifstream in(name_or_path);
  if (!in)
    throw BadInput(fmt::format("memory profile \"{}\" is neither a built-in profile nor a readable file", name_or_path),
                   fmt::format("built-in: {}; or a file from ulysses-train --calibrate-memory",
                               fmt::join(builtin_profile_names(), ", ")));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(fmt::format("{}: not JSON ({})", name_or_path, e.what()),
                   "write one with ulysses-train --calibrate-memory FILE");
  }
  return from_json(j, name_or_path);
}

void write_profile(const std::filesystem::path& path, const Profile& p) {
  const nlohmann::json j = {{"profile", p.name},           {"source", p.source},
                            {"cuda", p.cuda},              {"saved_factor", p.saved_factor},
                            {"work_factor", p.work_factor}, {"loss_factor", p.loss_factor},
                            {"device_fixed", p.device_fixed}, {"host_fixed", p.host_fixed},
                            {"checkpoint_bytes", p.checkpoint_bytes}, {"measurements", p.measurements}};
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) throw BadInput(fmt::format("cannot write {}", tmp.string()), "check the directory exists and is writable");
  }
  std::filesystem::rename(tmp, path);
}

std::string default_profile_name(bool cuda, const std::string& device_name) {
  if (!cuda) return "cpu";
  return device_name.find("H200") != std::string::npos ? "h200" : "h100";
}

}  // namespace ulysses::plan

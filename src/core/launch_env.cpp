#include "core/launch_env.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace ulysses {
namespace {

std::optional<int> count(const std::string& text) {   // 0 to 2^24, all of the text
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || v > (1 << 24)) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<int> number(const Environment& vars, const char* name) {
  const auto it = vars.find(name);
  return it == vars.end() ? std::nullopt : count(it->second);
}

// SLURM_STEP_TASKS_PER_NODE: "8(x4)", "4,4" or "2(x3),1" — the count when every node has the same.
std::optional<int> uniform_tasks_per_node(const Environment& vars) {
  const auto it = vars.find("SLURM_STEP_TASKS_PER_NODE");
  if (it == vars.end()) return std::nullopt;
  std::optional<int> same;
  std::string_view rest(it->second);
  while (!rest.empty()) {
    const std::string entry(rest.substr(0, rest.find(',')));
    rest.remove_prefix(std::min(rest.size(), entry.size() + 1));
    const std::optional<int> n = count(entry.substr(0, entry.find('(')));
    if (!n || *n == 0 || (same && *same != *n)) return std::nullopt;
    same = n;
  }
  return same;
}

std::optional<LaunchEnv> checked(std::optional<int> rank, std::optional<int> world, std::optional<int> on_node) {
  if (!rank || !world || !on_node || *rank >= *world || *on_node == 0 || *on_node > *world) return std::nullopt;
  return LaunchEnv{*rank, *world, *on_node};
}

}  // namespace

Environment this_environment() {
  Environment vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    const auto eq = v.find('=');
    if (eq != std::string_view::npos) vars.emplace(v.substr(0, eq), v.substr(eq + 1));
  }
  return vars;
}

std::optional<LaunchEnv> launch_env(const Environment& vars) {
  auto has = [&](const char* name) { return vars.contains(name); };
  if (has("PMI_RANK") && has("MPI_LOCALNRANKS"))
    return checked(number(vars, "PMI_RANK"), number(vars, "PMI_SIZE"), number(vars, "MPI_LOCALNRANKS"));
  if (has("OMPI_COMM_WORLD_RANK"))
    return checked(number(vars, "OMPI_COMM_WORLD_RANK"), number(vars, "OMPI_COMM_WORLD_SIZE"),
                   number(vars, "OMPI_COMM_WORLD_LOCAL_SIZE"));
  if (has("SLURM_STEP_NUM_TASKS") && (has("PMI_FD") || has("PMI_RANK") || has("PMIX_RANK")))
    return checked(number(vars, "SLURM_PROCID"), number(vars, "SLURM_STEP_NUM_TASKS"), uniform_tasks_per_node(vars));
  for (const auto& [name, value] : vars)
    for (const char* prefix : kLauncherPrefixes)
      if (name.starts_with(prefix) && !name.starts_with("SLURM_")) return std::nullopt;
  if (has("SLURM_STEP_ID")) return std::nullopt;   // a task of a step without PMI: a singleton among several
  return LaunchEnv{};
}

int launch_rank(const Environment& vars) {
  for (const char* name : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const std::optional<int> rank = number(vars, name)) return *rank;
  return 0;
}

}  // namespace ulysses

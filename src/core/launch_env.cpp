#include "core/launch_env.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

namespace ulysses {
namespace {

std::optional<int> number(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > (1 << 24)) return std::nullopt;
  return static_cast<int>(v);
}

// SLURM_STEP_TASKS_PER_NODE: "8(x4)", "4,4" or "2(x3),1" — the count when every node has the same.
std::optional<int> uniform_tasks_per_node(const char* text) {
  if (text == nullptr) return std::nullopt;
  std::optional<int> same;
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::string entry(rest.substr(0, rest.find(',')));
    rest.remove_prefix(std::min(rest.size(), entry.size() + 1));
    const std::optional<int> count = number(entry.substr(0, entry.find('(')).c_str());
    if (!count || *count == 0 || (same && *same != *count)) return std::nullopt;
    same = count;
  }
  return same;
}

std::optional<LaunchEnv> checked(std::optional<int> rank, std::optional<int> world, std::optional<int> on_node) {
  if (!rank || !world || !on_node || *rank >= *world || *on_node == 0 || *on_node > *world) return std::nullopt;
  return LaunchEnv{*rank, *world, *on_node};
}

}  // namespace

std::optional<LaunchEnv> launch_env(const EnvLookup& get) {
  if (get("PMI_RANK") && get("MPI_LOCALNRANKS"))
    return checked(number(get("PMI_RANK")), number(get("PMI_SIZE")), number(get("MPI_LOCALNRANKS")));
  if (get("OMPI_COMM_WORLD_RANK"))
    return checked(number(get("OMPI_COMM_WORLD_RANK")), number(get("OMPI_COMM_WORLD_SIZE")),
                   number(get("OMPI_COMM_WORLD_LOCAL_SIZE")));
  if (get("SLURM_STEP_NUM_TASKS"))
    return checked(number(get("SLURM_PROCID")), number(get("SLURM_STEP_NUM_TASKS")),
                   uniform_tasks_per_node(get("SLURM_STEP_TASKS_PER_NODE")));
  for (const char* launcher : {"PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "SLURM_STEP_ID"})
    if (get(launcher)) return std::nullopt;
  return LaunchEnv{};
}

std::optional<LaunchEnv> launch_env() {
  return launch_env([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace ulysses

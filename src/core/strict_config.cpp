#include "core/strict_config.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ulysses {
namespace {

std::string dashed(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// Line (1-based) of each key and section header as written, for the messages.
std::map<std::string, int> key_lines(const std::string& text) {
  std::map<std::string, int> lines;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto end = line[first] == '[' ? line.find(']', first) : line.find('=', first);
    if (end == std::string::npos) continue;
    std::string key = line.substr(first, end - first + (line[first] == '[' ? 1 : 0));
    key.erase(key.find_last_not_of(" \t") + 1);
    lines.emplace(key, number);
  }
  return lines;
}

}  // namespace

std::string nearest_key(const std::string& key, const std::vector<std::string>& known) {
  static const std::map<std::string, std::string> kSynonyms = {   // HF Trainer / DeepSpeed names → ours
      {"learning-rate", "lr"},         {"max-steps", "steps"},
      {"num-train-steps", "steps"},    {"save-steps", "save-every"},
      {"warmup-steps", "warmup"},      {"max-grad-norm", "clip"},
      {"gradient-clipping", "clip"},   {"gradient-accumulation-steps", "grad-accum"},
      {"per-device-train-batch-size", "micro-batch"}, {"train-micro-batch-size-per-gpu", "micro-batch"},
      {"output-dir", "output"},        {"adam-beta1", "beta1"},
      {"adam-beta2", "beta2"},         {"adam-epsilon", "eps"},
      {"gradient-checkpointing", "activation-checkpointing"}, {"save-total-limit", "keep-last"},
      {"lr-scheduler-type", "lr-decay"}, {"bf16", "precision"},
      {"sequence-parallel-size", "sp"}, {"resume-from-checkpoint", "resume"}};
  const std::string k = dashed(key);
  if (auto it = kSynonyms.find(k); it != kSynonyms.end()) return it->second;
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(3, k.size() / 3) + 1;   // farther than this: nothing close
  for (const auto& name : known)
    if (const std::size_t d = edit_distance(k, name); d < best_distance) best = name, best_distance = d;
  return best;
}

std::vector<CLI::ConfigItem> StrictConfig::from_config(std::istream& input) const {
  const std::string text((std::istreambuf_iterator<char>(input)), std::istreambuf_iterator<char>());
  const std::map<std::string, int> lines = key_lines(text);
  std::istringstream again(text);
  std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(again);
  std::vector<std::string> known, flags_only;
  for (const CLI::Option* o : app_.get_options())
    for (const auto& name : o->get_lnames()) (o->get_configurable() ? known : flags_only).push_back(name);
  const std::string file = app_.get_config_ptr() != nullptr ? app_.get_config_ptr()->as<std::string>() : "config";
  auto line_of = [&](const std::string& key) {
    const auto it = lines.find(key);
    return it == lines.end() ? std::string() : fmt::format(":{}", it->second);
  };
  std::vector<CLI::ConfigItem> out;
  for (CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") {   // CLI11's section markers
      if (item.name == "++" && !item.parents.empty()) {
        const std::string section = fmt::format("{}", fmt::join(item.parents, "."));
        throw CLI::ConfigError(fmt::format("{}{}: section [{}] — sections are not read; keys are top-level, the flags "
                                           "without -- (e.g. lr = 3e-4)",
                                           file, line_of("[" + section + "]"), section));
      }
      continue;
    }
    if (!item.parents.empty())
      throw CLI::ConfigError(fmt::format("{}{}: key \"{}\" is inside a section; keys are top-level, the flags without --",
                                         file, line_of("[" + item.parents.front() + "]"), item.fullname()));
    const std::string name = dashed(item.name);
    if (std::find(flags_only.begin(), flags_only.end(), name) != flags_only.end())
      throw CLI::ConfigError(fmt::format("{}{}: \"{}\" is a command-line flag only (--{}), not a config key", file,
                                         line_of(item.name), item.name, name));
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      const std::string near = nearest_key(item.name, known);
      throw CLI::ConfigError(fmt::format("{}{}: unknown key \"{}\"{}", file, line_of(item.name), item.name,
                                         near.empty() ? std::string(" (keys are the flags without --)")
                                                      : fmt::format(" (did you mean \"{}\"?)", near)));
    }
    item.name = name;
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace ulysses

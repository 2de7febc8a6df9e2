#include "core/strict_config.hpp"

#include <algorithm>
#include <map>
#include <regex>
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

struct Written {   // a key or [section] as the file writes it
  int line = 0;
  int again = 0;   // the line that writes the same key again, 0 when none
  std::string value;   // the text after '=', trimmed, without a trailing comment
};

// The value's text up to an unquoted '#', trimmed.
std::string value_text(const std::string& rest) {
  char quote = 0;
  std::size_t end = rest.size();
  for (std::size_t i = 0; i < rest.size() && end == rest.size(); ++i) {
    if (quote != 0 && rest[i] == quote) quote = 0;
    else if (quote == 0 && (rest[i] == '"' || rest[i] == '\'')) quote = rest[i];
    else if (quote == 0 && rest[i] == '#') end = i;
  }
  std::string v = rest.substr(0, end);
  v.erase(0, std::min(v.size(), v.find_first_not_of(" \t")));
  v.erase(v.find_last_not_of(" \t\r") + 1);
  return v;
}

// Each key and section header as written (its line, 1-based, and its value), for the messages.
std::map<std::string, Written> written_keys(const std::string& text) {
  std::map<std::string, Written> keys;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const bool section = line[first] == '[';
    const auto end = section ? line.find(']', first) : line.find('=', first);
    if (end == std::string::npos) continue;
    std::string key = line.substr(first, end - first + (section ? 1 : 0));
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = section ? "" : value_text(line.substr(end + 1));
    const auto [it, first_time] = keys.emplace(key, Written{number, 0, value});
    if (!first_time && it->second.again == 0) it->second.again = number;
  }
  return keys;
}

// "" when `v` (a value's text: trimmed, its comment cut) is a TOML value of a kind some flag takes: a string closed
// where it ends, a number, a boolean, an array (its items are CLI11's to read; it may go on over lines). Else what
// was found instead and how to write it: CLI11's reader would take an unclosed "packed or a bare word as text.
std::string not_toml(const std::string& v) {
  static const std::regex number(R"([+-]?[0-9](_?[0-9])*(\.[0-9](_?[0-9])*)?([eE][+-]?[0-9](_?[0-9])*)?|[+-]?(inf|nan))");
  if (v.empty()) return "no value (write one after '=')";
  if (v.starts_with("\"\"\"") || v.starts_with("'''") || v.front() == '[') return "";   // may go on over lines
  if (v.front() == '"' || v.front() == '\'') {
    const char quote = v.front();
    for (std::size_t i = 1; i < v.size(); ++i) {
      if (quote == '"' && v[i] == '\\') ++i;   // an escape: the next character is not the closing quote
      else if (v[i] == quote)
        return i + 1 == v.size() ? "" : fmt::format("text after the closing quote: {} (one value per key)", v);
    }
    return fmt::format("an unclosed string {} (close it: {}{})", v, v, quote);
  }
  if (v == "true" || v == "false" || std::regex_match(v, number)) return "";
  return fmt::format("the bare word {} (TOML strings are quoted: \"{}\")", v, v);
}

// What a TOML value is, from its text: "" where it is one an option of `wants` may take.
std::string mismatch(const std::string& wants, const std::string& v) {
  static const std::regex integer(R"([+-]?[0-9]+)");
  static const std::regex number(R"([+-]?([0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|inf|nan))");
  const bool quoted = !v.empty() && (v.front() == '"' || v.front() == '\'');
  const std::string inner = quoted && v.size() >= 2 ? v.substr(1, v.size() - 2) : v;
  const bool numeric = std::regex_match(inner, number);
  if (!v.empty() && v.front() == '[') return "the array " + v;
  if (wants == "a boolean") return v == "true" || v == "false" ? "" : (quoted ? "the string " : "") + v;
  if (v == "true" || v == "false") return "the boolean " + v;
  if (wants == "text") return "";
  if (quoted)   // a word such as auto: the flag's own check judges it
    return numeric ? "the string " + v + " (write it without quotes)" : "";
  if (wants == "an integer" && !std::regex_match(v, integer)) return (numeric ? "the number " : "") + v;
  return numeric ? "" : v;
}

// The TOML type an option takes: a flag a boolean; INT/UINT an integer; FLOAT a number; anything else text.
std::string wanted_type(const CLI::Option& o) {
  if (o.get_expected_min() == 0) return "a boolean";   // a flag
  const std::string type = o.get_type_name().substr(0, o.get_type_name().find(':'));
  if (type == "INT" || type == "UINT") return "an integer";
  if (type == "FLOAT" || type == "NUMBER") return "a number";
  return "text";
}

// A list flag's string value split at its delimiter ("q_proj,v_proj", as --print-config writes a list flag's
// default); any other value whole.
std::vector<std::string> list_items(const CLI::Option& o, const std::string& value) {
  if (o.get_expected_max() <= 1 || o.get_delimiter() == '\0') return {value};
  std::vector<std::string> items;
  std::istringstream in(value);
  for (std::string item; std::getline(in, item, o.get_delimiter());) items.push_back(item);
  return items;
}

// The option's own checks (member lists, ranges, transforms) on a copy of the value: their complaint, or "".
std::string refused_by_checks(const CLI::Option& o, std::string value) {
  auto& option = const_cast<CLI::Option&>(o);   // CLI11 2.1 lists validators through a non-const getter; none changes
  for (int i = 0;; ++i) {
    const CLI::Validator* check = nullptr;
    try {
      check = option.get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      return "";
    }
    if (std::string why = (*check)(value); !why.empty()) return why;
  }
}

// A value of the wrong TOML type, or one its flag's checks refuse: the file and line, the key, the type its flag
// takes and what was found, so that no value error loses where it was written.
void check_value(const CLI::Option& o, const std::string& key, const std::string& where,
                 const std::map<std::string, Written>& keys) {
  const auto it = keys.find(key);
  if (it == keys.end()) return;   // a form this line reader does not map (a dotted key): CLI11 judges it
  const std::string& v = it->second.value;
  if (const std::string found = not_toml(v); !found.empty())
    throw CLI::ConfigError(fmt::format("{}: key \"{}\" ({}): found {}", where, key, o.get_name(), found));
  if (v.starts_with('[') && o.get_expected_max() > 1) return;   // a list flag: its items are CLI11's to convert
  const std::string wants = wanted_type(o);
  if (const std::string found = mismatch(wants, v); !found.empty())
    throw CLI::ConfigError(
        fmt::format("{}: key \"{}\" takes {} ({}), found {}", where, key, wants, o.get_name(), found));
  const bool quoted = v.size() >= 2 && (v.front() == '"' || v.front() == '\'');
  const std::string text = quoted ? v.substr(1, v.size() - 2) : v;
  for (const std::string& item : list_items(o, text))
    if (const std::string why = refused_by_checks(o, item); !why.empty())
      throw CLI::ConfigError(fmt::format("{}: key \"{}\" = {}: {}", where, key, v, why));
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
  const std::map<std::string, Written> keys = written_keys(text);
  std::istringstream again(text);
  std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(again);
  std::vector<std::string> known, flags_only;
  for (const CLI::Option* o : app_.get_options())
    for (const auto& name : o->get_lnames()) (o->get_configurable() ? known : flags_only).push_back(name);
  const std::string file = app_.get_config_ptr() != nullptr ? app_.get_config_ptr()->as<std::string>() : "config";
  auto line_of = [&](const std::string& key) {
    const auto it = keys.find(key);
    return it == keys.end() ? std::string() : fmt::format(":{}", it->second.line);
  };
  const Written unmapped;   // a form the line reader does not map (a dotted key)
  auto written = [&](const std::string& key) -> const Written& {
    const auto it = keys.find(key);
    return it == keys.end() ? unmapped : it->second;
  };
  std::map<std::string, std::string> seen;   // dashed name → the key as first written
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
    const Written& here = written(item.name);
    if (const auto [it, first_time] = seen.emplace(name, item.name); !first_time || here.again != 0) {
      const int first = written(it->second).line, again = first_time ? here.again : here.line;
      throw CLI::ConfigError(fmt::format("{}:{}: key \"{}\" sets --{} again (line {} set it): write each key once",
                                         file, again, item.name, name, first));
    }
    const CLI::Option& option = *app_.get_option("--" + name);
    check_value(option, item.name, file + line_of(item.name), keys);
    if (item.inputs.size() == 1) item.inputs = list_items(option, item.inputs.front());
    item.name = name;
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace ulysses

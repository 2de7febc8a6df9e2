// JSON that comes from outside — dataset and checkpoint manifests, config.json, safetensors headers and
// indexes, memory profiles — parsed so that every way it can be bad is one BadInput line naming the file:
// not JSON (with the byte), a number no double holds (1e999 → nlohmann's out_of_range), or nesting deeper
// than kMaxJsonDepth (a document nested 200,000 deep parses, then overflows the stack in nlohmann's
// recursive copies). What the fields must hold is each reader's business.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ulysses {

inline constexpr int kMaxJsonDepth = 64;   // our files nest ≤ 5 deep; Hugging Face configs ≤ 6
inline constexpr std::size_t kMaxJsonBytes = std::size_t{64} << 20;   // read_json_file: a manifest or config
inline constexpr int kMaxOrderedKeys = 10000;   // keys of one object in ordered_json (its insert is a linear scan)

// `where` names the source in messages (a path, or "path: header"); `hint` ends every message. Json:
// nlohmann::json, or nlohmann::ordered_json where the key order matters (config.json is exported as read).
template <typename Json = nlohmann::json>
Json parse_json_input(std::string_view text, const std::string& where, const std::string& hint);

// The whole file (a regular file of at most kMaxJsonBytes: core/regular_file.hpp), then parse_json_input.
template <typename Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& path, const std::string& hint);

extern template nlohmann::json parse_json_input(std::string_view, const std::string&, const std::string&);
extern template nlohmann::ordered_json parse_json_input(std::string_view, const std::string&, const std::string&);
extern template nlohmann::json read_json_file(const std::filesystem::path&, const std::string&);
extern template nlohmann::ordered_json read_json_file(const std::filesystem::path&, const std::string&);

}  // namespace ulysses

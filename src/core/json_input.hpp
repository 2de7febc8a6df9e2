// JSON that comes from outside — dataset and checkpoint manifests, config.json, safetensors headers and
// indexes, memory profiles — parsed so that every way it can be bad is one BadInput line naming the file:
// not JSON (with the byte), a number no double holds (1e999 → nlohmann's out_of_range), or nesting deeper
// than kMaxJsonDepth (a document nested 200,000 deep parses, then overflows the stack in nlohmann's
// recursive copies). What the fields must hold is each reader's business.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

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

// A JSON value as T, its kind and range checked first: nlohmann's own conversion of 2.7e26 to an integer is
// undefined behaviour (a float cast), of 3e9 to int a silent wrap. BadInput "<what> is <value>, not <kind>".
template <typename T>
T json_value(const nlohmann::json& v, const std::string& what, const std::string& hint) {
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) ok = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    else if (v.is_number_integer()) ok = v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                                         (std::is_unsigned_v<T> || v.get<std::int64_t>() <= static_cast<std::int64_t>(std::numeric_limits<T>::max()));
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = v.is_number();
  } else {
    ok = v.is_string();
  }
  if (!ok) {
    const char* kind = std::is_same_v<T, bool> ? "true or false"
                       : std::is_integral_v<T> ? "an integer in range"
                       : std::is_floating_point_v<T> ? "a number" : "a string";
    throw BadInput(fmt::format("{} is {}, not {}", what, printable(v.dump()), kind), hint);
  }
  return v.get<T>();
}

extern template nlohmann::json parse_json_input(std::string_view, const std::string&, const std::string&);
extern template nlohmann::ordered_json parse_json_input(std::string_view, const std::string&, const std::string&);
extern template nlohmann::json read_json_file(const std::filesystem::path&, const std::string&);
extern template nlohmann::ordered_json read_json_file(const std::filesystem::path&, const std::string&);

}  // namespace ulysses

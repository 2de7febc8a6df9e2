#include "core/json_input.hpp"

#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace ulysses {

template <typename Json>
Json parse_json_input(std::string_view text, const std::string& where, const std::string& hint) {
  using json = Json;
  constexpr bool kOrdered = std::is_same_v<Json, nlohmann::ordered_json>;
  std::vector<int> keys;   // per open object, for ordered_json: its keys so far
  const typename json::parser_callback_t limits = [&](int depth, typename json::parse_event_t event, json&) {
    using E = typename json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth)
      throw BadInput(fmt::format("{}: JSON nested deeper than {} levels", where, kMaxJsonDepth), hint);
    if (kOrdered && event == E::object_start) keys.push_back(0);
    if (kOrdered && event == E::object_end) keys.pop_back();
    if (kOrdered && event == E::key && ++keys.back() > kMaxOrderedKeys)
      throw BadInput(fmt::format("{}: a JSON object with more than {} keys", where, kMaxOrderedKeys), hint);
    return true;
  };
  try {
    return json::parse(text, limits);
  } catch (const typename json::parse_error& e) {
    throw BadInput(fmt::format("{}: not valid JSON (byte {} of {})", where, e.byte, text.size()), hint);
  } catch (const typename json::out_of_range& e) {   // out_of_range.406: a number no double holds (1e999)
    throw BadInput(fmt::format("{}: a number out of range ({})", where, e.what()), hint);
  } catch (const typename json::exception& e) {   // any other way the library refuses the text
    throw BadInput(fmt::format("{}: not valid JSON ({})", where, printable(e.what(), 200)), hint);
  }
}

template <typename Json>
Json read_json_file(const std::filesystem::path& path, const std::string& hint) {
  return parse_json_input<Json>(read_small_file(path, "JSON file", kMaxJsonBytes), path.string(), hint);
}

template nlohmann::json parse_json_input(std::string_view, const std::string&, const std::string&);
template nlohmann::ordered_json parse_json_input(std::string_view, const std::string&, const std::string&);
template nlohmann::json read_json_file(const std::filesystem::path&, const std::string&);
template nlohmann::ordered_json read_json_file(const std::filesystem::path&, const std::string&);

}  // namespace ulysses

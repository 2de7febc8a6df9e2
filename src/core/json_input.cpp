#include "core/json_input.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses {

template <typename Json>
Json parse_json_input(std::string_view text, const std::string& where, const std::string& hint) {
  using json = Json;
  const typename json::parser_callback_t depth_limit = [&](int depth, typename json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw BadInput(fmt::format("{}: JSON nested deeper than {} levels", where, kMaxJsonDepth), hint);
    return true;
  };
  try {
    return json::parse(text, depth_limit);
  } catch (const typename json::parse_error& e) {
    throw BadInput(fmt::format("{}: not valid JSON (byte {} of {})", where, e.byte, text.size()), hint);
  } catch (const typename json::exception& e) {   // out_of_range.406: a number no double holds (1e999)
    throw BadInput(fmt::format("{}: a number out of range ({})", where, e.what()), hint);
  }
}

template <typename Json>
Json read_json_file(const std::filesystem::path& path, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(fmt::format("cannot open {}", path.string()), hint);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) throw BadInput(fmt::format("cannot read {}", path.string()), hint);
  return parse_json_input<Json>(text, path.string(), hint);
}

template nlohmann::json parse_json_input(std::string_view, const std::string&, const std::string&);
template nlohmann::ordered_json parse_json_input(std::string_view, const std::string&, const std::string&);
template nlohmann::json read_json_file(const std::filesystem::path&, const std::string&);
template nlohmann::ordered_json read_json_file(const std::filesystem::path&, const std::string&);

}  // namespace ulysses

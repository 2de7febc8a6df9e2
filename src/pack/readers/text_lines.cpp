#include "pack/readers/text_lines.hpp"

#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/parallel.hpp"
#include "tokenize/tokenizer.hpp"

namespace ulysses::pack {
namespace {

constexpr std::size_t kBatchBytes = std::size_t{16} << 20;   // text read ahead and tokenized at once

struct TextLine {
  std::string json;
  std::uint64_t number = 0;
  std::vector<std::int32_t> ids;
  std::optional<JsonLineError> error;
};

// One line's text → ids; a bad line keeps its error instead.
void tokenize_line(TextLine& t, const ReaderOptions& options) {
  try {
    if (const auto bad = tokenize::invalid_utf8_at(t.json))
      throw JsonLineError(*bad + 1, fmt::format("byte {} (0x{:02X}) is not valid UTF-8", *bad + 1,
                                                static_cast<unsigned char>(t.json[*bad])));
    nlohmann::json j;
    try {
      j = parse_json_input(t.json, "the line", "");
    } catch (const BadInput& e) {
      throw JsonLineError(0, e.what());
    }
    const auto text = j.is_object() ? j.find(options.text_key) : j.end();
    if (!j.is_object() || text == j.end() || !text->is_string())
      throw JsonLineError(0, fmt::format("no text (a JSON string) under \"{}\" (--text-key)", options.text_key));
    options.tokenizer->encode(text->get_ref<const std::string&>(), t.ids);
    const auto eos = options.tokenizer->eos_id();
    if (options.append_eos && eos && (t.ids.empty() || t.ids.back() != *eos)) t.ids.push_back(*eos);
  } catch (const JsonLineError& e) {
    t.ids.clear();
    t.error = e;
  }
  t.json = std::string();   // the batch keeps ids, not text
}

}  // namespace

void tokenize_lines(LineReader& lines, const ReaderOptions& options, const TakeDocument& take) {
  ULY_CHECK(options.tokenizer != nullptr, "tokenize_lines without a tokenizer");
  std::vector<TextLine> batch;
  std::string_view line;
  std::uint64_t number = 0;
  for (bool more = true; more;) {
    batch.clear();
    for (std::size_t bytes = 0; bytes < kBatchBytes && (more = lines.next(line));) {
      ++number;
      if (is_blank(line)) continue;
      batch.push_back({std::string(line), number, {}, std::nullopt});
      bytes += line.size();
    }
    parallel_for(batch.size(), options.threads, [&](std::size_t i) { tokenize_line(batch[i], options); });
    for (TextLine& t : batch) take(t.number, t.ids, t.error ? &*t.error : nullptr);
  }
}

}  // namespace ulysses::pack

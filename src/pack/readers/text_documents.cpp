#include "pack/readers/text_documents.hpp"

#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"
#include "tokenize/tokenizer.hpp"

namespace ulysses::pack {
namespace {

constexpr std::size_t kBatchBytes = std::size_t{16} << 20;   // text read ahead and tokenized at once

struct TextLine {
  std::string record;
  std::uint64_t number = 0;
  std::vector<std::int32_t> ids;
  std::optional<JsonLineError> error;   // set by the source (its problem) or by tokenize_record
};

// The text of a JSONL record.
std::string text_of(const std::string& line, const ReaderOptions& options) {
  nlohmann::json j;
  try {
    j = parse_json_input(line, "the line", "");
  } catch (const BadInput& e) {
    throw JsonLineError(0, e.what());
  }
  const auto text = j.is_object() ? j.find(options.text_key) : j.end();
  const bool chat = text != j.end() && text->is_array() && !text->empty() && text->front().is_object() &&
                    text->front().contains("role");
  if (chat)   // a conversation: encoded by the model's own tokenizer first (docs/user-guide.md, "Fine-tuning data")
    throw JsonLineError(0, fmt::format("\"{}\" holds a conversation (a list of messages), not text: encode it with "
                                       "the model's chat template first (python3 tools/chat_ids.py MODEL < sft.jsonl "
                                       "> ids.jsonl), then pack the ids with --loss-mask-key loss_mask "
                                       "(docs/user-guide.md, \"Fine-tuning data\")",
                                       options.text_key));
  if (!j.is_object() || text == j.end() || !text->is_string())
    throw JsonLineError(0, fmt::format("no text (a JSON string) under \"{}\" (--text-key)", options.text_key));
  return text->get<std::string>();
}

// One record → ids; a bad one keeps its error instead.
void tokenize_record(TextLine& t, bool json, const ReaderOptions& options) {
  if (t.error) return;
  try {
    if (const auto bad = tokenize::invalid_utf8_at(t.record))   // a JSONL line's column, or a text block's byte
      throw JsonLineError(json ? *bad + 1 : 0, fmt::format("byte {}{} (0x{:02X}) is not valid UTF-8", *bad + 1,
                                                           json ? "" : " of the document starting here",
                                                           static_cast<unsigned char>(t.record[*bad])));
    options.tokenizer->encode(json ? text_of(t.record, options) : t.record, t.ids, options.add_special_tokens);
    const auto eos = options.tokenizer->eos_id();
    if (options.append_eos && eos && (t.ids.empty() || t.ids.back() != *eos)) t.ids.push_back(*eos);
  } catch (const JsonLineError& e) {
    t.ids.clear();
    t.error = e;
  } catch (const tokenize::TextError& e) {
    t.ids.clear();
    t.error.emplace(0, e.what());
  }
  t.record = std::string();   // the batch keeps ids, not text
}

}  // namespace

std::string RecordSource::where(std::uint64_t number, std::size_t column) const {
  return column > 0 ? fmt::format(":{}:{}", number, column) : fmt::format(":{}", number);
}

bool JsonlRecords::next(Record& record) {
  std::string_view text;
  while (lines_.next(text)) {
    ++number_;
    if (is_blank(text)) continue;
    record.text.assign(text);
    record.number = number_;
    return true;
  }
  return false;
}

bool WholeText::next(Record& record) {
  if (done_) return false;
  done_ = true;
  record.text.clear();
  char buffer[1 << 16];
  for (std::size_t n; (n = stream_.read(buffer, sizeof buffer)) > 0;) record.text.append(buffer, n);
  record.number = 1;
  return !record.text.empty();   // an empty file is no document
}

bool TextBlocks::next(Record& record) {
  record.text.clear();
  std::string_view text;
  bool started = false;
  while (lines_.next(text)) {
    ++number_;
    if (is_blank(text)) {
      if (started) return true;
      continue;
    }
    if (!started) record.number = number_;
    if (started) record.text += '\n';
    record.text.append(text);
    started = true;
  }
  return started;
}

std::unique_ptr<RecordSource> text_records(ByteStream& stream, LineReader& lines, TextSplit split) {
  if (split == TextSplit::kFile) return std::make_unique<WholeText>(stream);
  return std::make_unique<TextBlocks>(lines);
}

void tokenize_documents(RecordSource& records, const ReaderOptions& options, const TakeDocument& take) {
  ULY_CHECK(options.tokenizer != nullptr, "tokenize_documents without a tokenizer");
  std::vector<TextLine> batch;
  Record record;
  for (bool more = true; more;) {
    batch.clear();
    for (std::size_t bytes = 0; bytes < kBatchBytes && (more = records.next(record));) {
      bytes += record.text.size() + sizeof(TextLine);   // empty records count too: a batch's size stays bounded
      std::optional<JsonLineError> error;
      if (!record.problem.empty()) error.emplace(0, std::exchange(record.problem, {}));
      batch.push_back({std::move(record.text), record.number, {}, std::move(error)});
    }
    parallel_for(batch.size(), options.threads,
                 [&](std::size_t i) { tokenize_record(batch[i], records.json(), options); });
    std::uint64_t tokens = 0;
    for (TextLine& t : batch) {
      tokens += t.ids.size();
      take(t.number, t.ids, t.error ? &*t.error : nullptr);
    }
    if (options.progress != nullptr) options.progress->add(0, tokens);
  }
}

}  // namespace ulysses::pack

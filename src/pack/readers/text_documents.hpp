// Documents of text → token ids with the model's tokenizer (ulysses-pack pack --tokenizer, and tokenize).
//
// A RecordSource hands out one record per document: a JSONL line ({"text": …} under options.text_key), or the
// text itself of a plain text file (the whole file, or each block between blank lines: --text-split; text_records
// picks the source for a file and an option) or of a parquet row (parquet.hpp).
// tokenize_documents reads records in batches of about 16 MiB, tokenizes them in parallel on options.threads
// workers, and hands them to `take` one by one in order, so what `take` sees — ids, errors, their order — is the
// same for any number of threads, and memory stays bounded by a batch (plus one document) whatever the file's size.
// Each batch's tokens go to options.progress when it is set.
// A document is the tokenizer's ids for its text (valid UTF-8), then its EOS when options.append_eos (unless the
// ids already end with it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pack/corpus.hpp"
#include "pack/readers/json_line.hpp"
#include "pack/readers/line_reader.hpp"

namespace ulysses::pack {

// One document's record.
struct Record {
  std::string text;            // a JSONL line holding the text (RecordSource::json()), or the text itself
  std::uint64_t number = 0;    // 1-based line (or parquet row) where it starts
  std::string problem;         // non-empty: the record is bad, and why (text is then empty)
};

class RecordSource {
 public:
  virtual ~RecordSource() = default;
  // The next record; false at the end.
  virtual bool next(Record& record) = 0;
  virtual bool json() const = 0;   // records are JSONL lines holding the text, not the text itself
  // Where record `number` is, to follow the file's name: ":LINE", or ":LINE:COLUMN" for a column > 0 (1-based byte).
  virtual std::string where(std::uint64_t number, std::size_t column) const;
};

// Non-blank JSONL lines.
class JsonlRecords final : public RecordSource {
 public:
  explicit JsonlRecords(LineReader& lines) : lines_(lines) {}
  bool next(Record& record) override;
  bool json() const override { return true; }

 private:
  LineReader& lines_;
  std::uint64_t number_ = 0;
};

// A plain text file as one document, byte for byte (none when it is empty).
class WholeText final : public RecordSource {
 public:
  explicit WholeText(ByteStream& stream) : stream_(stream) {}
  bool next(Record& record) override;
  bool json() const override { return false; }

 private:
  ByteStream& stream_;
  bool done_ = false;
};

// A plain text file cut at blank lines (only spaces, tabs, CR): each block of other lines is a document, its lines
// joined with '\n' (a CR before it kept); blank lines belong to no document.
class TextBlocks final : public RecordSource {
 public:
  explicit TextBlocks(LineReader& lines) : lines_(lines) {}
  bool next(Record& record) override;
  bool json() const override { return false; }

 private:
  LineReader& lines_;
  std::uint64_t number_ = 0;
};

// take(line number (1-based), the document's ids (take may move them), error): error is null for a good document;
// for a bad one it says why (its column, or 0 for the record as a whole) and ids is empty.
// The records of a plain text file for options.text_split: a WholeText over stream, or TextBlocks over lines.
std::unique_ptr<RecordSource> text_records(ByteStream& stream, LineReader& lines, TextSplit split);

using TakeDocument = std::function<void(std::uint64_t, std::vector<std::int32_t>&, const JsonLineError*)>;

void tokenize_documents(RecordSource& records, const ReaderOptions& options, const TakeDocument& take);

}  // namespace ulysses::pack

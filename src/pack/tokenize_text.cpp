// run_tokenize (pack.hpp): text → JSONL token ids with the model's tokenizer (readers/text_documents.hpp), one
// output line per document (a non-blank JSONL line, a plain text file or block, a parquet row), inputs in the order
// given. Written to a temporary name beside the output
// and renamed when complete; a bad line stops it with its file, line and column.
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "pack/pack.hpp"
#include "pack/readers/byte_stream.hpp"
#include "pack/readers/parquet.hpp"
#include "pack/readers/text_documents.hpp"
#include "pack/scan.hpp"

namespace ulysses::pack {

namespace fs = std::filesystem;

namespace {

// The output's temporary file, removed unless committed: no error, of any kind, leaves a partial file behind.
class TmpFile {
 public:
  explicit TmpFile(fs::path path) : path_(std::move(path)) {}
  ~TmpFile() {
    std::error_code ignored;
    if (!committed_) fs::remove(path_, ignored);
  }
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;
  const fs::path& path() const { return path_; }
  void commit(const fs::path& to) {
    fs::rename(path_, to);
    committed_ = true;
  }

 private:
  fs::path path_;
  bool committed_ = false;
};

// JSONL, plain text or parquet; any other input format holds ids, not text.
Format text_format(const std::string& path) {
  const Format f = detect_format(path);
  if (!holds_text(f))
    throw BadInput(fmt::format("input {} holds token ids, not text", path),
                   "tokenize reads JSONL[.gz|.zst] and parquet text (--text-key) and plain text (.txt, .md)");
  return f;
}

// The records of one input: a parquet file's text column, or the lines or blocks of a byte stream.
struct TextInput {
  std::unique_ptr<ByteStream> stream;
  std::unique_ptr<LineReader> lines;
  std::unique_ptr<RecordSource> records;
};

TextInput open_text(const std::string& path, const TokenizeOptions& o) {
  TextInput in;
  const Format format = text_format(path);
  if (format == Format::kParquet) {
    in.records = parquet_text_records(path, o.reader.text_key);
    return in;
  }
  in.stream = open_byte_stream(path);
  in.lines = std::make_unique<LineReader>(*in.stream);
  in.records = format == Format::kText ? text_records(*in.stream, *in.lines, o.reader.text_split)
                                       : std::make_unique<JsonlRecords>(*in.lines);
  return in;
}

}  // namespace

int run_tokenize(const TokenizeOptions& o) {
  if (fs::exists(o.output) && !o.overwrite)
    throw BadInput(fmt::format("--output {} exists", o.output.string()), "pass --overwrite to replace it");
  const std::vector<std::string> paths = expand_inputs(o.inputs);
  for (const std::string& path : paths) text_format(path);
  const tokenize::Tokenizer tokenizer = load_tokenizer(o.tokenizer, 0, o.reader.append_eos, o.reader.add_special_tokens);
  ReaderOptions options = o.reader;
  options.tokenizer = &tokenizer;
  options.threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  TmpFile tmp(o.output.string() + ".tmp");
  std::ofstream out(tmp.path(), std::ios::binary | std::ios::trunc);
  if (!out) throw BadInput(fmt::format("cannot write {}", tmp.path().string()), "check that --output's folder is writable");
  std::uint64_t documents = 0, tokens = 0;
  std::string line;
  Progress progress("tokenize", paths.size(), "files", "tokens");
  options.progress = &progress;
  for (const std::string& path : paths) {
    const TextInput in = open_text(path, o);
    tokenize_documents(*in.records, options, [&](std::uint64_t number, std::vector<std::int32_t>& ids,
                                                 const JsonLineError* error) {
      if (error != nullptr)
        throw BadInput(fmt::format("{}{}: {}", path, in.records->where(number, error->column()), error->what()),
                       fmt::format("each document's text must be valid UTF-8, as a string under \"{}\" (--text-key) "
                                   "for a JSONL line or a parquet row", o.reader.text_key));
      line = fmt::format("{{\"input_ids\": [{}]}}\n", fmt::join(ids, ", "));
      out.write(line.data(), static_cast<std::streamsize>(line.size()));
      ++documents;
      tokens += ids.size();
    });
    progress.add(1);
  }
  progress.finish();
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", tmp.path().string()));
  tmp.commit(o.output);
  log_info("{} documents, {} tokens -> {}", documents, tokens, o.output.string());
  return 0;
}

}  // namespace ulysses::pack

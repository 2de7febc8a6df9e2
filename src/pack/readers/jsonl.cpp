// JSONL inputs (plain, .gz, .zst): one JSON object per line, token ids under options.tokens_key and,
// when options.mask_key is set, a 0/1 loss mask of the same length under that key.
//
// The scan validates every line (json_line.hpp) and spills each kept document (spill.hpp: its ids are checked
// against the vocabulary there). Blank lines are skipped; an empty token array counts as an empty document. A bad
// line stops the scan with its 1-based line number and column, or with --on-error skip is counted and skipped.
//
// With a tokenizer (--tokenizer), each line holds a document's text under options.text_key instead — or, for a plain
// text input (scan_text), the file is text — tokenized by text_documents.hpp in parallel and taken in order.
#include <system_error>

#include "core/error.hpp"
#include "pack/readers/byte_stream.hpp"
#include "pack/readers/json_line.hpp"
#include "pack/readers/line_reader.hpp"
#include "pack/readers/readers.hpp"
#include "pack/readers/spill.hpp"
#include "pack/readers/text_documents.hpp"

namespace ulysses::pack {
namespace {

std::string line_hint(const ReaderOptions& options) {
  if (options.tokenizer != nullptr)
    return fmt::format("each line must be one JSON object (UTF-8) with a document's text as a string under \"{}\" "
                       "(--text-key); --on-error skip skips bad lines", options.text_key);
  std::string hint = fmt::format("each line must be one JSON object with its token ids as an array of "
                                 "integers under \"{}\" (--tokens-key)", options.tokens_key);
  if (!options.mask_key.empty()) {
    hint += fmt::format(" and a 0/1 loss mask of the same length under \"{}\" (--loss-mask-key)", options.mask_key);
  }
  if (options.vocab_size > 0) hint += fmt::format(", ids < --vocab-size {}", options.vocab_size);
  return hint + "; --on-error skip skips bad lines";
}

class JsonlScan {
 public:
  // plain_text: the file is text (scan_text), not JSONL lines
  JsonlScan(const std::filesystem::path& path, const ReaderOptions& options, DocSink& sink, bool plain_text)
      : path_(path), options_(options), sink_(sink), plain_text_(plain_text) {}

  std::unique_ptr<TokenSource> run() {
    std::error_code error;
    const std::filesystem::file_status status = std::filesystem::status(path_, error);
    if (error) throw BadInput(fmt::format("cannot open {}: {}", path_.string(), error.message()),
                              "check the path and its permissions");
    if (!std::filesystem::is_regular_file(status))   // a FIFO would block the reader, a directory cannot be read
      throw BadInput(fmt::format("input {} is not a regular file (a FIFO, device or directory)", path_.string()),
                     "pass a JSONL file (.jsonl, .jsonl.gz or .jsonl.zst)");
    sink_.stats().input_bytes += std::filesystem::file_size(path_);
    const auto stream = open_byte_stream(path_);
    DocumentSpill spill(path_, options_, sink_, options_.tokenizer == nullptr && !options_.mask_key.empty(),
                        line_hint(options_));
    LineReader lines(*stream);
    if (plain_text_) {
      spill.add_text(*text_records(*stream, lines, options_.text_split));
    } else if (options_.tokenizer != nullptr) {
      JsonlRecords records(lines);
      spill.add_text(records);
    } else {
      std::string_view line;
      for (std::uint64_t number = 1; lines.next(line); ++number) {
        if (!is_blank(line)) take_line(line, number, spill);
      }
    }
    return spill.finish();
  }

 private:
  void take_line(std::string_view line, std::uint64_t number, DocumentSpill& spill) {
    try {
      parse_token_line(line, options_.tokens_key, options_.mask_key, parsed_);
      spill.add(parsed_.ids, options_.mask_key.empty() ? nullptr : &parsed_.mask);
    } catch (const JsonLineError& e) {
      spill.bad(e.column() > 0 ? fmt::format("{}:{}:{}", path_.string(), number, e.column())
                               : fmt::format("{}:{}", path_.string(), number),
                e.what());
    }
  }

  const std::filesystem::path& path_;
  const ReaderOptions& options_;
  DocSink& sink_;
  const bool plain_text_;
  TokenLine parsed_;   // reused: its vectors keep their capacity from line to line
};

}  // namespace

std::unique_ptr<TokenSource> scan_jsonl(const std::filesystem::path& path, const ReaderOptions& options,
                                        DocSink& sink) {
  if (options.tokens_key.empty() || options.tokens_key == options.mask_key) {
    throw BadInput(fmt::format("{}: --tokens-key \"{}\" must be non-empty and differ from --loss-mask-key",
                               path.string(), options.tokens_key),
                   "pass a non-empty --tokens-key that differs from --loss-mask-key");
  }
  return JsonlScan(path, options, sink, false).run();
}

std::unique_ptr<TokenSource> scan_text(const std::filesystem::path& path, const ReaderOptions& options,
                                       DocSink& sink) {
  if (options.tokenizer == nullptr)
    throw BadInput(fmt::format("{} is plain text, which needs the model's tokenizer", path.string()),
                   "pass --tokenizer MODEL_DIR (its tokenizer.json or tokenizer.model)");
  return JsonlScan(path, options, sink, true).run();
}

}  // namespace ulysses::pack

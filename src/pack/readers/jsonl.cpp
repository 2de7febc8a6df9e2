// JSONL inputs (plain, .gz, .zst): one JSON object per line, token ids under options.tokens_key and,
// when options.mask_key is set, a 0/1 loss mask of the same length under that key.
//
// The scan validates every line (json_line.hpp) and checks its ids against the vocabulary, then
// spills the tokens of each kept document as int32 (and its mask as uint8) into scratch files named
// after the source id and the process. The files are unlinked right after they are created: they
// live exactly as long as the JsonlSource that preads them back, and vanish even if the process is
// killed. Blank lines are skipped; an empty token array counts as an empty document. A bad line stops
// the scan with its 1-based line number and column, or with --on-error skip is counted and skipped.
//
// With a tokenizer (--tokenizer), each line holds a document's text under options.text_key instead — or, for a plain
// text input (scan_text), the file is text — tokenized by text_documents.hpp in parallel and taken in order.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "pack/readers/byte_stream.hpp"
#include "pack/readers/input_file.hpp"
#include "pack/readers/json_line.hpp"
#include "pack/readers/line_reader.hpp"
#include "pack/readers/readers.hpp"
#include "pack/readers/text_documents.hpp"

namespace ulysses::pack {
namespace {

constexpr std::size_t kSpillBufferBytes = std::size_t{4} << 20;

// An append-only scratch file, unlinked on creation; finish() hands it over for reading.
class SpillFile {
 public:
  explicit SpillFile(const std::filesystem::path& path) : name_(path.string()) {
    fd_ = ::open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      throw BadInput(fmt::format("cannot create scratch file {}: {}", name_, std::strerror(errno)),
                     "--scratch-dir must be a writable folder with room for 4 bytes per token");
    }
    ::unlink(name_.c_str());
    buffer_.reserve(kSpillBufferBytes);
  }
  ~SpillFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  template <class T>
  void append(const std::vector<T>& values) {
    const auto* bytes = reinterpret_cast<const char*>(values.data());
    const std::size_t size = values.size() * sizeof(T);
    if (buffer_.size() + size > kSpillBufferBytes) flush();
    if (size > kSpillBufferBytes) return write_all(bytes, size);
    buffer_.insert(buffer_.end(), bytes, bytes + size);
  }

  InputFile finish() {
    flush();
    return InputFile::adopt(std::exchange(fd_, -1), name_ + " (scratch, unlinked)");
  }

 private:
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  void write_all(const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == ENOSPC || errno == EDQUOT))   // the user's disk, not our bug: exit 2 with the way out
        throw BadInput(fmt::format("cannot write scratch file {}: {}", name_, std::strerror(errno)),
                       "JSONL inputs are spilled as int32 tokens inside --output's folder (4 bytes a token): free "
                       "space there or choose another --output");
      if (n <= 0) {
        throw std::runtime_error(fmt::format("cannot write scratch file {}: {}", name_,
                                             n < 0 ? std::strerror(errno) : "short write"));
      }
      data += n;
      size -= static_cast<std::size_t>(n);
    }
  }

  std::string name_;
  int fd_ = -1;
  std::vector<char> buffer_;
};

class JsonlSource final : public TokenSource {
 public:
  JsonlSource(std::string name, InputFile ids, std::optional<InputFile> mask)
      : name_(std::move(name)), ids_(std::move(ids)), mask_(std::move(mask)) {}
  const std::string& name() const override { return name_; }
  bool has_loss_mask() const override { return mask_.has_value(); }
  void read(std::uint64_t offset, std::uint32_t n, std::int32_t* ids, std::uint8_t* mask) const override {
    ids_.read_exact(offset * sizeof(std::int32_t), ids, std::size_t{n} * sizeof(std::int32_t));
    if (mask == nullptr) return;
    if (mask_) mask_->read_exact(offset, mask, n);
    else std::fill_n(mask, n, std::uint8_t{1});
  }

 private:
  std::string name_;
  InputFile ids_;
  std::optional<InputFile> mask_;
};

// Ids are already known to be in [0, 2^31); returns the largest, or throws for one >= vocab_size.
std::int64_t check_vocab(const std::vector<std::int32_t>& ids, std::int64_t vocab_size) {
  std::int32_t max_id = -1;
  for (const std::int32_t id : ids) max_id = std::max(max_id, id);
  if (vocab_size > 0 && max_id >= vocab_size) {
    const auto bad = std::find_if(ids.begin(), ids.end(), [&](std::int32_t id) { return id >= vocab_size; });
    throw JsonLineError(0, fmt::format("token id {} (token {} of the line) is >= the vocabulary size {}",
                                       *bad, bad - ids.begin(), vocab_size));
  }
  return max_id;
}

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
    const std::uintmax_t bytes = std::filesystem::file_size(path_);
    sink_.stats().input_bytes += bytes;
    const auto stream = open_byte_stream(path_);
    std::filesystem::create_directories(options_.scratch_dir);
    SpillFile ids(spill_path("ids.int32"));
    std::optional<SpillFile> mask;
    if (!options_.mask_key.empty()) mask.emplace(spill_path("mask.uint8"));

    LineReader lines(*stream);
    if (plain_text_) {
      take_text(*text_records(*stream, lines, options_.text_split), ids);
    } else if (options_.tokenizer != nullptr) {
      JsonlRecords records(lines);
      take_text(records, ids);
    } else {
      std::string_view line;
      for (std::uint64_t number = 1; lines.next(line); ++number) {
        if (!is_blank(line)) take_line(line, number, ids, mask ? &*mask : nullptr);
      }
    }
    std::optional<InputFile> mask_file;
    if (mask) mask_file.emplace(mask->finish());
    return std::make_unique<JsonlSource>(path_.string(), ids.finish(), std::move(mask_file));
  }

 private:
  std::filesystem::path spill_path(const char* kind) const {
    return options_.scratch_dir / fmt::format("source-{}-{}.{}", sink_.source(), ::getpid(), kind);
  }

  void take_line(std::string_view line, std::uint64_t number, SpillFile& ids, SpillFile* mask) {
    std::int64_t max_id = -1;
    try {
      parse_token_line(line, options_.tokens_key, options_.mask_key, parsed_);
      max_id = check_vocab(parsed_.ids, options_.vocab_size);
    } catch (const JsonLineError& e) {
      return bad_line(number, e);
    }
    ids.append(parsed_.ids);
    if (mask != nullptr) mask->append(parsed_.mask);
    sink_.add(offset_, parsed_.ids.size());
    sink_.stats().max_id = std::max(sink_.stats().max_id, max_id);
    offset_ += parsed_.ids.size();
  }

  void take_text(RecordSource& records, SpillFile& ids) {
    tokenize_documents(records, options_, [&](std::uint64_t number, std::vector<std::int32_t>& doc,
                                              const JsonLineError* error) {
      if (error != nullptr) return bad_line(number, *error);
      try {
        sink_.stats().max_id = std::max(sink_.stats().max_id, check_vocab(doc, options_.vocab_size));
      } catch (const JsonLineError& e) {
        return bad_line(number, e);
      }
      ids.append(doc);
      sink_.add(offset_, doc.size());
      offset_ += doc.size();
    });
  }

  void bad_line(std::uint64_t line_number, const JsonLineError& e) {
    const std::string where = e.column() > 0 ? fmt::format("{}:{}:{}", path_.string(), line_number, e.column())
                                             : fmt::format("{}:{}", path_.string(), line_number);
    if (options_.on_error == OnError::kStop) throw BadInput(where + ": " + e.what(), line_hint(options_));
    if (sink_.stats().skipped_documents++ == 0) {
      log_info("{}: {} (--on-error skip: skipping this and any further bad lines)", where, e.what());
    }
  }

  const std::filesystem::path& path_;
  const ReaderOptions& options_;
  DocSink& sink_;
  const bool plain_text_;
  TokenLine parsed_;            // reused: its vectors keep their capacity from line to line
  std::uint64_t offset_ = 0;    // tokens spilled so far
};

}  // namespace

std::unique_ptr<TokenSource> scan_jsonl(const std::filesystem::path& path, const ReaderOptions& options,
                                        DocSink& sink) {
  if (options.tokens_key.empty() || options.tokens_key == options.mask_key) {
    throw BadInput(fmt::format("{}: --tokens-key \"{}\" must be non-empty and differ from --loss-mask-key",
                               path.string(), options.tokens_key),
                   "pass a non-empty --tokens-key that differs from --loss-mask-key");
  }
  ULY_CHECK(!options.scratch_dir.empty(), "no scratch_dir to spill {} into", path.string());
  return JsonlScan(path, options, sink, false).run();
}

std::unique_ptr<TokenSource> scan_text(const std::filesystem::path& path, const ReaderOptions& options,
                                       DocSink& sink) {
  if (options.tokenizer == nullptr)
    throw BadInput(fmt::format("{} is plain text, which needs the model's tokenizer", path.string()),
                   "pass --tokenizer MODEL_DIR (its tokenizer.json or tokenizer.model)");
  ULY_CHECK(!options.scratch_dir.empty(), "no scratch_dir to spill {} into", path.string());
  return JsonlScan(path, options, sink, true).run();
}

}  // namespace ulysses::pack

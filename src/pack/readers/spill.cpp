#include "pack/readers/spill.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "pack/readers/input_file.hpp"
#include "pack/readers/json_line.hpp"

namespace ulysses::pack {

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
                       "text, JSONL and parquet inputs are spilled as int32 tokens inside --output's folder (4 bytes "
                       "a token): free space there or choose another --output");
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

namespace {

class SpilledSource final : public TokenSource {
 public:
  SpilledSource(std::string name, InputFile ids, std::optional<InputFile> mask)
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
    throw JsonLineError(0, fmt::format("token id {} (token {} of the document) is >= the vocabulary size {}", *bad,
                                       bad - ids.begin(), vocab_size));
  }
  return max_id;
}

}  // namespace

DocumentSpill::DocumentSpill(const std::filesystem::path& input, const ReaderOptions& options, DocSink& sink,
                             bool with_mask, std::string hint)
    : input_(input.string()), options_(options), sink_(sink), hint_(std::move(hint)) {
  ULY_CHECK(!options.scratch_dir.empty(), "no scratch_dir to spill {} into", input_);
  std::filesystem::create_directories(options.scratch_dir);
  ids_ = std::make_unique<SpillFile>(spill_path("ids.int32"));
  if (with_mask) mask_ = std::make_unique<SpillFile>(spill_path("mask.uint8"));
}

DocumentSpill::~DocumentSpill() = default;

std::filesystem::path DocumentSpill::spill_path(const char* kind) const {
  return options_.scratch_dir / fmt::format("source-{}-{}.{}", sink_.source(), ::getpid(), kind);
}

void DocumentSpill::add(const std::vector<std::int32_t>& ids, const std::vector<std::uint8_t>* mask) {
  ULY_CHECK((mask != nullptr) == (mask_ != nullptr) && (mask == nullptr || mask->size() == ids.size()),
            "{}: a document of {} ids with {} mask values", input_, ids.size(), mask ? mask->size() : 0);
  const std::int64_t max_id = check_vocab(ids, options_.vocab_size);
  ids_->append(ids);
  if (mask != nullptr) mask_->append(*mask);
  sink_.add(offset_, ids.size());
  sink_.stats().max_id = std::max(sink_.stats().max_id, max_id);
  offset_ += ids.size();
}

void DocumentSpill::bad(const std::string& where, const std::string& what) {
  if (options_.on_error == OnError::kStop) throw BadInput(where + ": " + what, hint_);
  if (sink_.stats().skipped_documents++ == 0)
    log_info("{}: {} (--on-error skip: skipping this and any further bad documents)", where, what);
}

void DocumentSpill::add_text(RecordSource& records) {
  tokenize_documents(records, options_, [&](std::uint64_t number, std::vector<std::int32_t>& doc,
                                            const JsonLineError* error) {
    if (error != nullptr) return bad(input_ + records.where(number, error->column()), error->what());
    try {
      add(doc, nullptr);
    } catch (const JsonLineError& e) {
      bad(input_ + records.where(number, e.column()), e.what());
    }
  });
}

std::unique_ptr<TokenSource> DocumentSpill::finish() {
  std::optional<InputFile> mask_file;
  if (mask_) mask_file.emplace(mask_->finish());
  return std::make_unique<SpilledSource>(input_, ids_->finish(), std::move(mask_file));
}

}  // namespace ulysses::pack

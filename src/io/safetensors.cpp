// Implements io/safetensors.hpp. All validation happens once, in the Reader constructor: afterwards every
// TensorInfo is sized to its shape, inside the data section and disjoint from the others, so read() only
// moves bytes. The Writer builds the whole header from its declarations before it creates the file, and
// removes the file on any failure until finish() returns.
#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <fstream>
#include <limits>
#include <optional>
#include <system_error>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/regular_file.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ulysses::st {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian, so must the host be");

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;   // the official library's limit
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kCorruptHint = "the file is corrupt or not safetensors; re-download or re-export it";
constexpr const char* kTruncatedHint = "the file is truncated (an interrupted download or copy?); re-download it";

struct DTypeRow {
  DType dtype;
  const char* name;
  std::size_t size;
};
constexpr std::array<DTypeRow, 10> kDTypes{{
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4}, {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1},
}};
static_assert([] {
  for (std::size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}(), "kDTypes must list the DType enumerators in order");

const DTypeRow& row(DType d) { return kDTypes.at(static_cast<std::size_t>(d)); }

// ---- errors and raw I/O ----------------------------------------------------------------------------

std::string errno_text() { return std::system_category().message(errno); }

[[noreturn]] void io_failed(const fs::path& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", path.string(), what));
}

// A JSON value for an error message, cut short: a corrupt header can hold anything.
std::string brief(const json& j) {
  std::string s = j.dump();
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

// Closes a descriptor unless released, so a constructor that throws does not leak it.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void pread_exact(int fd, void* dst, std::uint64_t n, std::uint64_t offset, const fs::path& path) {
  auto* p = static_cast<char*>(dst);
  for (std::uint64_t done = 0; done < n;) {
    const ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r > 0) {
      done += static_cast<std::uint64_t>(r);
    } else if (r == 0) {
      io_failed(path, fmt::format("short read: {} of {} bytes at offset {} (file truncated while open?)",
                                  done, n, offset));
    } else if (errno != EINTR) {
      io_failed(path, fmt::format("read of {} bytes at offset {} failed: {}", n, offset, errno_text()));
    }
  }
}

// Closes and removes a file the Writer created but did not finish.
void abandon(int& fd, const fs::path& path) noexcept {
  ::close(std::exchange(fd, -1));
  ::unlink(path.c_str());
}

// Writes all n bytes; on failure abandons the file and throws naming it.
void write_or_abandon(int& fd, const void* src, std::uint64_t n, const fs::path& path) {
  const auto* p = static_cast<const char*>(src);
  for (std::uint64_t done = 0; done < n;) {
    const ssize_t r = ::write(fd, p + done, n - done);
    if (r > 0) {
      done += static_cast<std::uint64_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      const std::string why = r < 0 ? errno_text() : "no progress";
      abandon(fd, path);
      io_failed(path, fmt::format("short write: {} of {} bytes ({}); the unfinished file was removed", done, n, why));
    }
  }
}

int open_for_reading(const fs::path& path) { return open_regular_file(path, "safetensors file"); }

std::uint64_t regular_file_size(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) io_failed(path, "fstat failed: " + errno_text());
  if (!S_ISREG(st.st_mode))
    throw BadInput(fmt::format("{} is not a regular file", path.string()), "pass a .safetensors file");
  return static_cast<std::uint64_t>(st.st_size);
}

int create_new(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) return fd;
  const bool exists = errno == EEXIST;
  const std::string why = errno_text();
  if (exists)
    throw BadInput(fmt::format("{} already exists; the safetensors writer only creates new files", path.string()),
                   "write to a fresh temporary name and rename it once finish() returns");
  throw BadInput(fmt::format("cannot create {}: {}", path.string(), why),
                 "choose an output path on a writable filesystem");
}

// ---- header parsing (Reader) ------------------------------------------------------------------------

// numel * itemsize, or nothing if it overflows 64 bits. Dimensions must be non-negative.
std::optional<std::uint64_t> checked_nbytes(const std::vector<std::int64_t>& shape, DType d) {
  std::uint64_t n = itemsize(d);
  for (std::int64_t dim : shape)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(dim), &n)) return std::nullopt;
  return n;
}

std::string header_text(int fd, const fs::path& path, std::uint64_t file_size) {
  if (file_size < 8)
    throw BadInput(fmt::format("{}: {} bytes, shorter than the 8-byte header length", path.string(), file_size),
                   kTruncatedHint);
  std::uint64_t n = 0;   // little-endian on disk and on the host
  pread_exact(fd, &n, sizeof n, 0, path);
  if (n > kMaxHeaderBytes)
    throw BadInput(fmt::format("{}: header length {} exceeds the {}-byte limit", path.string(), n, kMaxHeaderBytes),
                   kCorruptHint);
  if (n > file_size - 8)
    throw BadInput(fmt::format("{}: header length {} runs past the end of the file ({} bytes)", path.string(), n,
                               file_size),
                   kTruncatedHint);
  std::string text(n, '\0');
  pread_exact(fd, text.data(), n, 8, path);
  return text;
}

json parse_header(const std::string& text, const fs::path& path) {
  const json j = parse_json_input(text, path.string() + ": header", kCorruptHint);   // padding whitespace allowed
  if (!j.is_object())
    throw BadInput(fmt::format("{}: header must be a JSON object, got {}", path.string(), brief(j)), kCorruptHint);
  return j;
}

DType parse_dtype(const json& j, const std::string& where) {
  if (!j.is_string()) throw BadInput(fmt::format("{}: \"dtype\" must be a string, got {}", where, brief(j)), kCorruptHint);
  return dtype_from_name(j.get<std::string>(), where);
}

std::vector<std::int64_t> parse_shape(const json& j, const std::string& where) {
  if (!j.is_array()) throw BadInput(fmt::format("{}: \"shape\" must be an array, got {}", where, brief(j)), kCorruptHint);
  std::vector<std::int64_t> shape;
  for (const json& d : j) {
    if (!d.is_number_integer())
      throw BadInput(fmt::format("{}: shape {} must hold integers", where, brief(j)), kCorruptHint);
    if (!d.is_number_unsigned() && d.get<std::int64_t>() < 0)
      throw BadInput(fmt::format("{}: negative dimension {} in shape {}", where, d.get<std::int64_t>(), brief(j)),
                     kCorruptHint);
    if (d.is_number_unsigned() && d.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max())
      throw BadInput(fmt::format("{}: dimension {} in shape {} is too large", where, d.get<std::uint64_t>(), brief(j)),
                     kCorruptHint);
    shape.push_back(d.get<std::int64_t>());
  }
  return shape;
}

std::pair<std::uint64_t, std::uint64_t> parse_offsets(const json& j, const std::string& where) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned())
    throw BadInput(fmt::format("{}: \"data_offsets\" must be two non-negative integers, got {}", where, brief(j)),
                   kCorruptHint);
  const auto begin = j[0].get<std::uint64_t>(), end = j[1].get<std::uint64_t>();
  if (begin > end)
    throw BadInput(fmt::format("{}: data_offsets [{}, {}] have begin > end", where, begin, end), kCorruptHint);
  return {begin, end};
}

void check_size(const TensorInfo& t, const std::string& where) {
  const std::optional<std::uint64_t> need = checked_nbytes(t.shape, t.dtype);
  if (!need)
    throw BadInput(fmt::format("{}: shape [{}] of {} overflows a 64-bit byte count", where, fmt::join(t.shape, ", "),
                               dtype_name(t.dtype)),
                   kCorruptHint);
  if (*need != t.nbytes())
    throw BadInput(fmt::format("{}: data_offsets [{}, {}] span {} bytes, but shape [{}] of {} needs {} ({} x {} bytes)",
                               where, t.begin, t.end, t.nbytes(), fmt::join(t.shape, ", "), dtype_name(t.dtype),
                               *need, *need / itemsize(t.dtype), itemsize(t.dtype)),
                   kCorruptHint);
}

TensorInfo parse_tensor(const std::string& name, const json& entry, const fs::path& path) {
  const std::string where = fmt::format("{}: tensor '{}'", path.string(), name);
  if (!entry.is_object())
    throw BadInput(fmt::format("{}: entry must be an object with dtype, shape and data_offsets, got {}", where,
                               brief(entry)),
                   kCorruptHint);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) throw BadInput(fmt::format("{}: \"{}\" is missing", where, key), kCorruptHint);
  TensorInfo t{name, parse_dtype(entry.at("dtype"), where), parse_shape(entry.at("shape"), where)};
  std::tie(t.begin, t.end) = parse_offsets(entry.at("data_offsets"), where);
  check_size(t, where);
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& j, const fs::path& path) {
  if (!j.is_object())
    throw BadInput(fmt::format("{}: {} must be an object of strings, got {}", path.string(), kMetadataKey, brief(j)),
                   kCorruptHint);
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      throw BadInput(fmt::format("{}: {} entry \"{}\" must be a string, got {}", path.string(), kMetadataKey, key,
                                 brief(value)),
                     kCorruptHint);
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// `tensors` sorted by (begin, end). Empty tensors occupy no bytes and overlap nothing.
void check_layout(const std::vector<TensorInfo>& tensors, std::uint64_t data_size, const fs::path& path) {
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.end > data_size)
      throw BadInput(fmt::format("{}: tensor '{}' data_offsets [{}, {}] run past the data section ({} bytes)",
                                 path.string(), t.name, t.begin, t.end, data_size),
                     kTruncatedHint);
    if (t.nbytes() == 0) continue;
    if (prev && prev->end > t.begin)
      throw BadInput(fmt::format("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path.string(), prev->name,
                                 prev->begin, prev->end, t.name, t.begin, t.end),
                     kCorruptHint);
    prev = &t;
  }
}

// ---- header building (Writer) -----------------------------------------------------------------------

std::uint64_t decl_nbytes(const Writer::Decl& d, const fs::path& path) {
  for (std::int64_t dim : d.shape)
    ULY_CHECK(dim >= 0, "{}: tensor '{}' has negative dimension {}", path.string(), d.name, dim);
  const std::optional<std::uint64_t> n = checked_nbytes(d.shape, d.dtype);
  ULY_CHECK(n, "{}: tensor '{}' shape [{}] overflows a 64-bit byte count", path.string(), d.name,
            fmt::join(d.shape, ", "));
  return *n;
}

// The header: metadata first, then the tensors in declared order with contiguous offsets; padded with
// spaces to a multiple of 8 bytes so that the data section starts 8-aligned.
std::string build_header(const fs::path& path, const std::vector<Writer::Decl>& decls,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h[kMetadataKey] = metadata;
  std::uint64_t offset = 0;
  for (const Writer::Decl& d : decls) {
    ULY_CHECK(d.name != kMetadataKey && !h.contains(d.name), "{}: tensor name '{}' is reserved or declared twice",
              path.string(), d.name);
    const std::uint64_t n = decl_nbytes(d, path);
    h[d.name] = {{"dtype", dtype_name(d.dtype)},
                 {"shape", d.shape},
                 {"data_offsets", nlohmann::ordered_json::array({offset, offset + n})}};
    offset += n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// ---- Hugging Face index -----------------------------------------------------------------------------

bool is_plain_file_name(const std::string& s) {
  const fs::path p(s);
  return !s.empty() && s != "." && s != ".." && p == p.filename();
}

// weight_map of model.safetensors.index.json: tensor name -> shard file name in the same directory.
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const json j = read_json_file(index_path, kCorruptHint);
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object() || j.at("weight_map").empty())
    throw BadInput(fmt::format("{}: expected an object with a non-empty \"weight_map\" object", index_path.string()),
                   kCorruptHint);
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : j.at("weight_map").items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()))
      throw BadInput(fmt::format("{}: weight_map entry '{}' must name a shard file in the same directory, got {}",
                                 index_path.string(), name, brief(shard)),
                     kCorruptHint);
    weight_map[name] = shard.get<std::string>();
  }
  return weight_map;
}

Reader open_shard(const fs::path& index_path, const std::string& shard, const std::string& tensor) {
  const fs::path path = index_path.parent_path() / shard;
  if (!fs::exists(path))
    throw BadInput(fmt::format("{} maps tensor '{}' to shard {}, which is missing", index_path.string(), tensor,
                               path.string()),
                   "download every shard the index lists");
  return Reader(path);
}

}  // namespace

// ---- dtypes -----------------------------------------------------------------------------------------

std::size_t itemsize(DType d) { return row(d).size; }

const char* dtype_name(DType d) { return row(d).name; }

DType dtype_from_name(const std::string& name, const std::string& where) {
  for (const DTypeRow& r : kDTypes)
    if (name == r.name) return r.dtype;
  throw BadInput(fmt::format("{}: unknown dtype \"{}\"", where, name),
                 "supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL; convert the weights to one of them");
}

std::uint64_t TensorInfo::numel() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// ---- Reader -----------------------------------------------------------------------------------------

Reader::Reader(const fs::path& path) : path_(path) {
  Fd fd(open_for_reading(path_));
  const std::uint64_t file_size = regular_file_size(fd.get(), path_);
  const std::string text = header_text(fd.get(), path_, file_size);
  data_start_ = 8 + text.size();
  const json header = parse_header(text, path_);
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      metadata_ = parse_metadata(value, path_);
    else
      tensors_.push_back(parse_tensor(key, value, path_));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  check_layout(tensors_, file_size - data_start_, path_);
  fd_ = fd.release();
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

Reader::Reader(Reader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_start_(o.data_start_),
      tensors_(std::move(o.tensors_)),
      metadata_(std::move(o.metadata_)) {}

Reader& Reader::operator=(Reader&& o) noexcept {
  if (this == &o) return *this;
  if (fd_ >= 0) ::close(fd_);
  path_ = std::move(o.path_);
  fd_ = std::exchange(o.fd_, -1);
  data_start_ = o.data_start_;
  tensors_ = std::move(o.tensors_);
  metadata_ = std::move(o.metadata_);
  return *this;
}

const TensorInfo* Reader::find(const std::string& name) const {
  const auto it = std::find_if(tensors_.begin(), tensors_.end(), [&](const TensorInfo& t) { return t.name == name; });
  return it == tensors_.end() ? nullptr : &*it;
}

void Reader::read(const TensorInfo& t, void* dst) const {
  ULY_CHECK(fd_ >= 0, "read of '{}' from a moved-from Reader", t.name);
  pread_exact(fd_, dst, t.nbytes(), data_start_ + t.begin, path_);
}

void Reader::read_range(const TensorInfo& t, std::uint64_t offset, std::uint64_t n, void* dst) const {
  ULY_CHECK(fd_ >= 0, "read of '{}' from a moved-from Reader", t.name);
  ULY_CHECK(offset <= t.nbytes() && n <= t.nbytes() - offset, "{}: range [{}, +{}) outside tensor '{}' ({} bytes)",
            path_.string(), offset, n, t.name, t.nbytes());
  pread_exact(fd_, dst, n, data_start_ + t.begin + offset, path_);
}

// ---- Writer -----------------------------------------------------------------------------------------

Writer::Writer(const fs::path& path, std::vector<Decl> tensors, const std::map<std::string, std::string>& metadata)
    : path_(path), decls_(std::move(tensors)) {
  const std::string header = build_header(path_, decls_, metadata);
  const std::uint64_t n = header.size();   // little-endian on disk and on the host
  fd_ = create_new(path_);
  write_or_abandon(fd_, &n, sizeof n, path_);
  write_or_abandon(fd_, header.data(), n, path_);
}

Writer::~Writer() {
  if (fd_ >= 0) abandon(fd_, path_);
}

void Writer::write_next(const void* data, std::uint64_t nbytes) {
  ULY_CHECK(fd_ >= 0 && next_ < decls_.size(), "{}: write_next after finish, a failure, or all {} tensors",
            path_.string(), decls_.size());
  const Decl& d = decls_[next_];
  const std::uint64_t want = decl_nbytes(d, path_);
  ULY_CHECK(nbytes == want && next_done_ == 0, "{}: tensor '{}' needs {} bytes, got {}", path_.string(), d.name,
            want, nbytes);
  write_or_abandon(fd_, data, nbytes, path_);
  ++next_;
}

void Writer::write_part(const void* data, std::uint64_t nbytes) {
  // skip empty tensors first: a zero-byte piece is never needed to complete one
  while (next_ < decls_.size() && next_done_ == 0 && decl_nbytes(decls_[next_], path_) == 0) ++next_;
  if (nbytes == 0) return;
  ULY_CHECK(fd_ >= 0 && next_ < decls_.size(), "{}: write_part after finish, a failure, or all {} tensors",
            path_.string(), decls_.size());
  const std::uint64_t want = decl_nbytes(decls_[next_], path_);
  ULY_CHECK(nbytes <= want - next_done_, "{}: tensor '{}' needs {} more bytes, got a piece of {}", path_.string(),
            decls_[next_].name, want - next_done_, nbytes);
  write_or_abandon(fd_, data, nbytes, path_);
  next_done_ += nbytes;
  if (next_done_ == want) {
    ++next_;
    next_done_ = 0;
    while (next_ < decls_.size() && decl_nbytes(decls_[next_], path_) == 0) ++next_;
  }
}

void Writer::finish() {
  ULY_CHECK(fd_ >= 0, "{}: finish() after finish or a failure", path_.string());
  while (next_done_ == 0 && next_ < decls_.size() && decl_nbytes(decls_[next_], path_) == 0) ++next_;
  ULY_CHECK(next_ == decls_.size(), "{}: finish() with {} of {} tensors written (next: '{}')", path_.string(), next_,
            decls_.size(), decls_[next_].name);
  if (::fsync(fd_) != 0) {
    const std::string why = errno_text();
    abandon(fd_, path_);
    io_failed(path_, fmt::format("fsync failed ({}); the unfinished file was removed", why));
  }
  if (::close(std::exchange(fd_, -1)) != 0) {
    const std::string why = errno_text();
    ::unlink(path_.c_str());
    io_failed(path_, fmt::format("close failed ({}); the unfinished file was removed", why));
  }
}

// ---- HfWeights --------------------------------------------------------------------------------------

HfWeights::HfWeights(const fs::path& dir) : dir_(dir) {
  if (!fs::is_directory(dir_))
    throw BadInput(fmt::format("{} is not a directory", dir_.string()),
                   "pass a Hugging Face model directory (config.json + *.safetensors)");
  if (fs::exists(dir_ / kSingleFile)) {
    files_.emplace_back(dir_ / kSingleFile);
    for (const TensorInfo& t : files_[0].tensors()) index_[t.name] = {0, &t};
    return;
  }
  const fs::path index_path = dir_ / kIndexFile;
  if (!fs::exists(index_path))
    throw BadInput(fmt::format("{} holds neither {} nor {}", dir_.string(), kSingleFile, kIndexFile),
                   "save the model with save_pretrained(..., safe_serialization=True), or convert its .bin weights");
  std::map<std::string, std::size_t> shard_ids;   // shard file name -> index in files_
  for (const auto& [name, shard] : read_weight_map(index_path)) {
    const auto [it, fresh] = shard_ids.try_emplace(shard, files_.size());
    if (fresh) files_.push_back(open_shard(index_path, shard, name));
    const Reader& r = files_[it->second];
    const TensorInfo* t = r.find(name);
    if (!t)
      throw BadInput(fmt::format("{} maps tensor '{}' to {}, which does not hold it ({} tensors there)",
                                 index_path.string(), name, r.path().string(), r.tensors().size()),
                     "the index and the shards come from different saves; re-download or re-save the model");
    index_[name] = {it->second, t};
  }
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& entry : index_) names.push_back(entry.first);
  return names;
}

const TensorInfo& HfWeights::info(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    throw BadInput(fmt::format("tensor '{}' not found in {} ({} tensors)", name, dir_.string(), index_.size()),
                   "the weights do not match the model; check config.json against the checkpoint");
  return *it->second.second;
}

bool HfWeights::contains(const std::string& name) const { return index_.count(name) != 0; }

void HfWeights::read(const std::string& name, void* dst) const {
  const TensorInfo& t = info(name);
  files_[index_.at(name).first].read(t, dst);
}

void HfWeights::read_range(const std::string& name, std::uint64_t offset, std::uint64_t n, void* dst) const {
  const TensorInfo& t = info(name);
  files_[index_.at(name).first].read_range(t, offset, n, dst);
}

const fs::path& HfWeights::file_of(const std::string& name) const {
  info(name);   // BadInput if absent
  return files_[index_.at(name).first].path();
}

}  // namespace ulysses::st

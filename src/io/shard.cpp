// Shard I/O over the HDF5 C API (format: shard_format.hpp; public spec: docs/data-format.md).
//
// Writer: input_ids (and loss_mask) are created at full size [N, S], chunked [1, chunk_len], with no
// filter and no fill value, all chunks allocated up front; in a new file HDF5 places them one after the
// other in row order, so a dataset's rows are one byte range. append() writes whole rows there with
// pwrite through a descriptor of our own, outside HDF5: the thread-safe library holds one global lock
// through every call, so writers on several threads would otherwise copy one at a time.
// HDF5 never writes those bytes itself (no fill value, no chunk cache), and the file is closed after the
// last pwrite. Should the chunks not form one range in row order, append() falls back to one H5Dwrite
// per dataset (chunk cache off, so each chunk still goes from the caller's buffer to the file in one
// write). Either way the file's bytes are the same, and with no timestamps the same content gives the
// same bytes. close() writes the metadata datasets and then the root attributes, so a file without the
// "format" attribute is an incomplete one.
// PlannedShardWriter (ulysses-pack's): the same file, written in another order — everything HDF5 writes
// first (metadata known from the plan), then the rows by pwrite alone, hashed while they are in cache.
// Reader: checks format, version, sizes, dtypes and the document CSR at open, before trusting the
// payload (BadInput naming the file and the numbers), keeps the metadata in memory, and reads exactly
// the requested hyperslab (chunk cache off here too: the +1 token is a small read, not a whole chunk).
// Every HDF5 call is checked: an I/O failure throws std::runtime_error, a malformed file BadInput, both
// with the file, the call and HDF5's innermost message. HDF5's own printing to stderr is silenced for
// the duration of each public call (per thread: the error stack is thread-local in the thread-safe build).
#include "io/shard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "io/shard_format.hpp"

namespace ulysses::shard {
namespace {

// ---- Checked HDF5 calls ------------------------------------------------------------------------

enum class Blame { kIo, kInput };   // std::runtime_error (disk, OS) or BadInput (the file is malformed)

// Silences HDF5's automatic error printing on this thread while alive.
class QuietH5 {
 public:
  QuietH5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietH5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietH5(const QuietH5&) = delete;
  QuietH5& operator=(const QuietH5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The description of the deepest entry of this thread's HDF5 error stack (where the failure began).
std::string innermost_h5_error() {
  std::string msg = "no HDF5 message";
  auto take_first = [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
    if (n == 0 && e->desc != nullptr) *static_cast<std::string*>(out) = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_first, &msg);
  return msg;
}

[[noreturn]] void h5_failed(Blame blame, const std::string& where, std::string_view call, const char* src,
                            int line) {
  const std::string_view fn = call.substr(0, call.find('('));
  const std::string msg = fmt::format("{}: {} failed: {}", where, fn, innermost_h5_error());
  if (blame == Blame::kInput)
    throw BadInput(msg, "the file is not a complete ulysses-packed shard; re-run ulysses-pack");
  throw std::runtime_error(fmt::format("{} [{}:{}]", msg, src, line));
}

// hid_t, herr_t and htri_t all report failure as a negative value.
template <typename T>
T check_h5(T result, Blame blame, const std::string& where, const char* call, const char* src, int line) {
  if (result < 0) h5_failed(blame, where, call, src, line);
  return result;
}

#define CHECK_H5(where, call) check_h5((call), Blame::kIo, (where), #call, __FILE__, __LINE__)
#define CHECK_H5_INPUT(where, call) check_h5((call), Blame::kInput, (where), #call, __FILE__, __LINE__)

// Owns one hid_t; closed by Close on destruction. release() closes now and returns the status.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)) {}
  Handle& operator=(Handle&& o) noexcept {
    std::swap(id_, o.id_);
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) Close(id_);
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  herr_t release() { return Close(std::exchange(id_, -1)); }

 private:
  hid_t id_ = -1;
};
using File = Handle<H5Fclose>;
using Dataset = Handle<H5Dclose>;
using Space = Handle<H5Sclose>;
using Plist = Handle<H5Pclose>;
using Type = Handle<H5Tclose>;
using Attr = Handle<H5Aclose>;

constexpr std::int64_t kMaxChunkLen = 65536;

// The expected file dtype of each dataset, for the reader's checks and messages.
struct IntSpec {
  const char* name;
  std::size_t bytes;
  bool is_signed;
  const char* dtype;
};
constexpr IntSpec kIdsSpec{kInputIds, 4, true, "int32"};
constexpr IntSpec kMaskSpec{kLossMask, 1, false, "uint8"};
constexpr IntSpec kLengthsSpec{kSeqLengths, 4, true, "int32"};
constexpr IntSpec kOffsetsSpec{kDocOffsets, 8, true, "int64"};
constexpr IntSpec kStartsSpec{kDocStarts, 4, true, "int32"};

// Chunk cache of 0 bytes: every chunk is larger, so HDF5 moves the selection between the caller's buffer
// and the file directly: a whole chunk in one write, and a read of part of a chunk (the +1 token) fetches at
// most HDF5's 64 KiB sieve buffer of it, not the chunk.
Plist uncached_dataset_access(const std::string& where) {
  Plist dapl(CHECK_H5(where, H5Pcreate(H5P_DATASET_ACCESS)));
  CHECK_H5(where, H5Pset_chunk_cache(dapl.get(), 1, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
  return dapl;
}

// File locking on, but a filesystem without locks (some Lustre/GPFS mounts) is not an error.
Plist file_access(const std::string& where) {
  Plist fapl(CHECK_H5(where, H5Pcreate(H5P_FILE_ACCESS)));
  CHECK_H5(where, H5Pset_file_locking(fapl.get(), true, true));
  return fapl;
}

// The file space of `ds` with the block [row, row + rows) × [col, col + cols) selected.
Space select_block(hid_t ds, hsize_t row, hsize_t col, hsize_t rows, hsize_t cols, const std::string& where) {
  Space space(CHECK_H5(where, H5Dget_space(ds)));
  const hsize_t start[2] = {row, col}, count[2] = {rows, cols};
  CHECK_H5(where, H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
  return space;
}

// "" when the metadata of one sequence is valid for seq_len, else what is wrong, with the numbers.
std::string meta_problem(const SequenceMeta& m, std::int64_t seq_len) {
  if (m.length < 1 || m.length > seq_len)
    return fmt::format("length {} is outside [1, seq_len = {}]", m.length, seq_len);
  if (m.doc_starts.empty()) return "has no document start (the first must be 0)";
  if (m.doc_starts.front() != 0) return fmt::format("first document start is {}, not 0", m.doc_starts.front());
  for (std::size_t k = 1; k < m.doc_starts.size(); ++k)
    if (m.doc_starts[k] <= m.doc_starts[k - 1])
      return fmt::format("document starts {} then {} are not ascending", m.doc_starts[k - 1], m.doc_starts[k]);
  if (m.doc_starts.back() >= m.length)
    return fmt::format("document start {} is not below its length {}", m.doc_starts.back(), m.length);
  return "";
}

// Throws BadInput unless seq_len, sp and alignment are positive and seq_len % (sp * alignment) == 0.
void check_params(const ShardParams& p, const std::string& where) {
  if (p.seq_len <= 0 || p.sp <= 0 || p.alignment <= 0)
    throw BadInput(fmt::format("{}: seq_len ({}), sp ({}) and alignment ({}) must be positive", where,
                               p.seq_len, p.sp, p.alignment));
  if (p.seq_len > std::numeric_limits<std::int32_t>::max())
    throw BadInput(fmt::format("{}: seq_len ({}) exceeds the int32 positions of the format", where, p.seq_len));
  if (p.seq_len % (p.sp * p.alignment) != 0)
    throw BadInput(fmt::format("{}: seq_len ({}) is not a multiple of sp ({}) × alignment ({})", where,
                               p.seq_len, p.sp, p.alignment),
                   fmt::format("use a seq_len that is a multiple of {}", p.sp * p.alignment));
}

// ---- Writing -----------------------------------------------------------------------------------

// A [rows, seq_len] token dataset, chunked [1, chunk_len], never filled (every chunk is written whole).
// Its chunks are allocated at creation, contiguous and in row order, so the file's bytes do not depend on
// how the rows are split into appends, and HDF5 writes none of their bytes unless append() asks it to.
Dataset create_token_dataset(hid_t file, const char* name, hid_t file_type, hsize_t rows, const ShardParams& p,
                             const std::string& where) {
  const hsize_t dims[2] = {rows, static_cast<hsize_t>(p.seq_len)};
  const hsize_t chunk[2] = {1, static_cast<hsize_t>(chunk_len_for(p.seq_len, p.sp))};
  Space space(CHECK_H5(where, H5Screate_simple(2, dims, nullptr)));
  Plist dcpl(CHECK_H5(where, H5Pcreate(H5P_DATASET_CREATE)));
  CHECK_H5(where, H5Pset_chunk(dcpl.get(), 2, chunk));
  CHECK_H5(where, H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  CHECK_H5(where, H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));   // every chunk placed, in row order
  CHECK_H5(where, H5Pset_obj_track_times(dcpl.get(), false));
  Plist dapl = uncached_dataset_access(where);
  return Dataset(CHECK_H5(where, H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(),
                                            dapl.get())));
}

// Bytes per pwrite of token rows. Larger writes let the kernel fill the page cache with large folios,
// which cost twice the system time per byte here (Linux 6.18, ext4: measured from 2 MiB up); 128 KiB
// to 512 KiB measure the same.
constexpr std::size_t kWritePieceBytes = std::size_t{256} << 10;

// The shard opened a second time for the token rows: pwrite() on it takes no HDF5 lock. Also read by
// PlannedShardWriter to hash the bytes around the rows.
class RawFile {
 public:
  explicit RawFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDWR | O_CLOEXEC)) {
    if (fd_ < 0) failed("open for writing");
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  ~RawFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Writes all `bytes` at `offset`, in pwrites of at most kWritePieceBytes, or throws std::runtime_error
  // (a full disk, an I/O error).
  void write_at(std::uint64_t offset, const void* data, std::size_t bytes) const {
    const auto* p = static_cast<const char*>(data);
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t piece = std::min(bytes - done, kWritePieceBytes);
      const ssize_t n = ::pwrite(fd_, p + done, piece, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) failed(fmt::format("pwrite of {} bytes at byte {}", bytes - done, offset + done));
      done += static_cast<std::size_t>(n);
    }
  }

  // Feeds bytes [begin, end) of the file to `stream`, or throws std::runtime_error.
  void hash_range(std::uint64_t begin, std::uint64_t end, Xxh3Stream& stream) const {
    std::vector<char> chunk(static_cast<std::size_t>(std::min<std::uint64_t>(end - begin, kWritePieceBytes)));
    for (std::uint64_t at = begin; at < end;) {
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), end - at));
      const ssize_t n = ::pread(fd_, chunk.data(), want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) failed(fmt::format("pread of {} bytes at byte {}", end - at, at));
      stream.update(chunk.data(), static_cast<std::size_t>(n));
      at += static_cast<std::uint64_t>(n);
    }
  }

  std::uint64_t size() const {
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) failed("lseek");
    return static_cast<std::uint64_t>(end);
  }

  // Closes the descriptor, reporting a deferred write error (some network filesystems report them here).
  void close() {
    if (::close(std::exchange(fd_, -1)) != 0) failed("close");
  }

 private:
  [[noreturn]] void failed(const std::string& what) const {
    throw std::runtime_error(fmt::format("{}: {} failed: {}", path_, what, std::strerror(errno)));
  }
  std::string path_;
  int fd_ = -1;
};

// A [N, seq_len] token dataset being written, and where its rows lie in the file.
struct TokenDataset {
  Dataset ds;
  hid_t mem_type = -1;              // the native type of one token (a predefined type: never closed)
  std::size_t token_bytes = 0;
  haddr_t first_byte = HADDR_UNDEF; // row r is at first_byte + r·seq_len·token_bytes; HADDR_UNDEF: unknown
};

// The file address of chunk (row, col) of `ds`, checked to be allocated with `bytes` unfiltered bytes.
// HDF5 1.10 finds it by walking the chunk index: O(chunks), so this is for a few chunks only.
haddr_t chunk_address(hid_t ds, hsize_t row, hsize_t col, hsize_t bytes, const std::string& where) {
  const hsize_t offset[2] = {row, col};
  unsigned filters = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t size = 0;
  CHECK_H5(where, H5Dget_chunk_info_by_coord(ds, offset, &filters, &address, &size));
  return filters == 0 && size == bytes ? address : HADDR_UNDEF;
}

// The address of row 0 when the chunks of `t` (allocated early) fill one byte range in row order, else
// HADDR_UNDEF. Checked by its first and last chunks: equal-sized chunks that start and end exactly there
// fill the range, and HDF5 allocates them in index (row) order from the end of the file.
haddr_t rows_first_byte(const TokenDataset& t, hsize_t rows, hsize_t seq_len, hsize_t chunk_len,
                        const std::string& where) {
  const hsize_t chunk_bytes = chunk_len * t.token_bytes;
  const haddr_t first = chunk_address(t.ds.get(), 0, 0, chunk_bytes, where);
  const haddr_t last = chunk_address(t.ds.get(), rows - 1, seq_len - chunk_len, chunk_bytes, where);
  const bool one_range = first != HADDR_UNDEF && last != HADDR_UNDEF &&
                         last - first == rows * seq_len * t.token_bytes - chunk_bytes;   // unsigned: last >= first
  return one_range ? first : HADDR_UNDEF;
}

// A new token dataset `name` of `rows` rows (see create_token_dataset), with the place of its rows.
TokenDataset create_tokens(hid_t file, const char* name, hid_t file_type, hid_t mem_type, hsize_t rows,
                           const ShardParams& p, const std::string& where) {
  TokenDataset t;
  t.ds = create_token_dataset(file, name, file_type, rows, p, where);
  t.mem_type = mem_type;
  t.token_bytes = H5Tget_size(mem_type);
  t.first_byte = rows_first_byte(t, rows, static_cast<hsize_t>(p.seq_len),
                                 static_cast<hsize_t>(chunk_len_for(p.seq_len, p.sp)), where);
  return t;
}

// Rows [row, row + rows) of `t` from data [rows, seq_len]: written through `raw` when the rows' place is
// known, else by one H5Dwrite.
void write_rows(const TokenDataset& t, const RawFile& raw, hsize_t row, hsize_t rows, hsize_t seq_len,
                const void* data, const std::string& where) {
  const hsize_t row_bytes = seq_len * t.token_bytes;
  if (t.first_byte != HADDR_UNDEF) {
    raw.write_at(t.first_byte + row * row_bytes, data, static_cast<std::size_t>(rows * row_bytes));
    return;
  }
  Space file_space = select_block(t.ds.get(), row, 0, rows, seq_len, where);
  const hsize_t mem_dims[2] = {rows, seq_len};
  Space mem_space(CHECK_H5(where, H5Screate_simple(2, mem_dims, nullptr)));
  CHECK_H5(where, H5Dwrite(t.ds.get(), t.mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data));
}

// A contiguous 1-D dataset [values.size()] holding `values`.
template <typename T>
void write_vector(hid_t file, const char* name, hid_t file_type, hid_t mem_type, const std::vector<T>& values,
                  const std::string& where) {
  const hsize_t dims[1] = {values.size()};
  Space space(CHECK_H5(where, H5Screate_simple(1, dims, nullptr)));
  Plist dcpl(CHECK_H5(where, H5Pcreate(H5P_DATASET_CREATE)));
  CHECK_H5(where, H5Pset_obj_track_times(dcpl.get(), false));
  Dataset ds(CHECK_H5(where, H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(),
                                        H5P_DEFAULT)));
  CHECK_H5(where, H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
}

void write_int_attr(hid_t file, const char* name, std::int64_t value, const std::string& where) {
  Space space(CHECK_H5(where, H5Screate(H5S_SCALAR)));
  Attr attr(CHECK_H5(where, H5Acreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  CHECK_H5(where, H5Awrite(attr.get(), H5T_NATIVE_INT64, &value));
}

// A variable-length UTF-8 string: what h5py writes for a Python str, and reads back as one.
void write_string_attr(hid_t file, const char* name, const char* value, const std::string& where) {
  Type type(CHECK_H5(where, H5Tcopy(H5T_C_S1)));
  CHECK_H5(where, H5Tset_size(type.get(), H5T_VARIABLE));
  CHECK_H5(where, H5Tset_cset(type.get(), H5T_CSET_UTF8));
  Space space(CHECK_H5(where, H5Screate(H5S_SCALAR)));
  Attr attr(CHECK_H5(where, H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  CHECK_H5(where, H5Awrite(attr.get(), type.get(), &value));
}

// The contents of the metadata datasets, filled one (checked) sequence at a time.
struct MetaColumns {
  std::vector<std::int32_t> lengths;          // seq_lengths [N]
  std::vector<std::int64_t> doc_offsets{0};   // doc_offsets [N + 1]: CSR into doc_starts
  std::vector<std::int32_t> doc_starts;       // doc_starts [D]

  void add(const SequenceMeta& m) {
    lengths.push_back(m.length);
    doc_starts.insert(doc_starts.end(), m.doc_starts.begin(), m.doc_starts.end());
    doc_offsets.push_back(static_cast<std::int64_t>(doc_starts.size()));
  }
};

// A new, empty shard file (truncating `where`), without timestamps, so equal content gives equal bytes.
File create_shard_file(const std::string& where) {
  Plist fapl = file_access(where);
  // The HDF5 1.10 format: its fixed-array chunk index halves the library's CPU time per chunk.
  CHECK_H5(where, H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110));
  Plist fcpl(CHECK_H5(where, H5Pcreate(H5P_FILE_CREATE)));
  CHECK_H5(where, H5Pset_obj_track_times(fcpl.get(), false));   // the root group's times, as for datasets
  return File(CHECK_H5(where, H5Fcreate(where.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get())));
}

// The metadata datasets, then the root attributes, "format" last: a file without it is incomplete.
void write_metadata(hid_t f, const ShardParams& p, const MetaColumns& c, const std::string& where) {
  write_vector(f, kSeqLengths, H5T_STD_I32LE, H5T_NATIVE_INT32, c.lengths, where);
  write_vector(f, kDocOffsets, H5T_STD_I64LE, H5T_NATIVE_INT64, c.doc_offsets, where);
  write_vector(f, kDocStarts, H5T_STD_I32LE, H5T_NATIVE_INT32, c.doc_starts, where);
  write_int_attr(f, kAttrVersion, kFormatVersion, where);
  write_int_attr(f, kAttrSeqLen, p.seq_len, where);
  write_int_attr(f, kAttrSp, p.sp, where);
  write_int_attr(f, kAttrAlignment, p.alignment, where);
  write_int_attr(f, kAttrChunkLen, chunk_len_for(p.seq_len, p.sp), where);
  write_int_attr(f, kAttrPadId, p.pad_id, where);
  write_string_attr(f, kAttrFormat, kFormatName, where);
}

// ---- Reading -----------------------------------------------------------------------------------

Attr open_attr(hid_t file, const char* name, const std::string& where) {
  if (CHECK_H5_INPUT(where, H5Aexists(file, name)) == 0)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is missing", where, name),
                   "not a complete ulysses-packed shard (written by ulysses-pack, closed properly)");
  Attr attr(CHECK_H5_INPUT(where, H5Aopen(file, name, H5P_DEFAULT)));
  Space space(CHECK_H5_INPUT(where, H5Aget_space(attr.get())));
  if (CHECK_H5_INPUT(where, H5Sget_simple_extent_npoints(space.get())) != 1)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is not a scalar", where, name));
  return attr;
}

H5T_class_t attr_class(hid_t attr, const std::string& where) {
  Type type(CHECK_H5_INPUT(where, H5Aget_type(attr)));
  return H5Tget_class(type.get());
}

std::int64_t read_int_attr(hid_t file, const char* name, const std::string& where) {
  Attr attr = open_attr(file, name, where);
  if (attr_class(attr.get(), where) != H5T_INTEGER)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is not an integer", where, name));
  std::int64_t value = 0;
  CHECK_H5_INPUT(where, H5Aread(attr.get(), H5T_NATIVE_INT64, &value));
  return value;
}

// Variable-length (h5py str) or fixed-length (h5py bytes) strings; fixed ones lose trailing NULs/spaces.
std::string read_string_attr(hid_t file, const char* name, const std::string& where) {
  Attr attr = open_attr(file, name, where);
  if (attr_class(attr.get(), where) != H5T_STRING)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is not a string", where, name));
  Type file_type(CHECK_H5_INPUT(where, H5Aget_type(attr.get())));
  if (CHECK_H5_INPUT(where, H5Tis_variable_str(file_type.get())) > 0) {
    Type mem_type(CHECK_H5_INPUT(where, H5Tcopy(H5T_C_S1)));
    CHECK_H5_INPUT(where, H5Tset_size(mem_type.get(), H5T_VARIABLE));
    CHECK_H5_INPUT(where, H5Tset_cset(mem_type.get(), H5Tget_cset(file_type.get())));   // HDF5 converts no csets
    char* value = nullptr;
    CHECK_H5_INPUT(where, H5Aread(attr.get(), mem_type.get(), &value));
    std::string out = value != nullptr ? value : "";
    H5free_memory(value);
    return out;
  }
  std::string out(H5Tget_size(file_type.get()), '\0');
  CHECK_H5_INPUT(where, H5Aread(attr.get(), file_type.get(), out.data()));
  out.erase(out.find_last_not_of(std::string_view("\0 ", 2)) + 1);
  return out;
}

// Opens dataset spec.name, checks its dtype, and returns it with its dims.
Dataset open_dataset(hid_t file, const IntSpec& spec, std::vector<hsize_t>& dims, const std::string& where) {
  if (CHECK_H5_INPUT(where, H5Lexists(file, spec.name, H5P_DEFAULT)) == 0)
    throw BadInput(fmt::format("{}: dataset \"{}\" is missing", where, spec.name));
  Plist dapl = uncached_dataset_access(where);
  Dataset ds(CHECK_H5_INPUT(where, H5Dopen2(file, spec.name, dapl.get())));
  Type type(CHECK_H5_INPUT(where, H5Dget_type(ds.get())));
  const bool ok = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == spec.bytes &&
                  (H5Tget_sign(type.get()) == H5T_SGN_2) == spec.is_signed;
  if (!ok) throw BadInput(fmt::format("{}: dataset \"{}\" must have dtype {}", where, spec.name, spec.dtype));
  Space space(CHECK_H5_INPUT(where, H5Dget_space(ds.get())));
  dims.resize(static_cast<std::size_t>(CHECK_H5_INPUT(where, H5Sget_simple_extent_ndims(space.get()))));
  CHECK_H5_INPUT(where, H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  return ds;
}

void check_shape(const IntSpec& spec, const std::vector<hsize_t>& dims, const std::vector<hsize_t>& want,
                 const std::string& why, const std::string& where) {
  if (dims != want)
    throw BadInput(fmt::format("{}: dataset \"{}\" has shape [{}], expected [{}] ({})", where, spec.name,
                               fmt::join(dims, ", "), fmt::join(want, ", "), why));
}

// The whole 1-D dataset spec.name, checked to hold `count` values.
template <typename T>
std::vector<T> read_vector(hid_t file, const IntSpec& spec, hid_t mem_type, hsize_t count, const std::string& why,
                           const std::string& where) {
  std::vector<hsize_t> dims;
  Dataset ds = open_dataset(file, spec, dims, where);
  check_shape(spec, dims, {count}, why, where);
  std::vector<T> values(count);
  if (count > 0) CHECK_H5_INPUT(where, H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
  return values;
}

// doc_offsets [N + 1] starts at 0 and never decreases (so it indexes doc_starts [D = doc_offsets[N]]).
void check_offsets(const std::vector<std::int64_t>& offsets, const std::string& where) {
  if (offsets.front() != 0)
    throw BadInput(fmt::format("{}: {}[0] is {}, not 0", where, kDocOffsets, offsets.front()));
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
    if (offsets[i + 1] < offsets[i])
      throw BadInput(fmt::format("{}: {} decreases at sequence {} ({} then {})", where, kDocOffsets, i,
                                 offsets[i], offsets[i + 1]));
}

// The metadata datasets (seq_lengths [N], doc_offsets [N + 1], doc_starts [D]), each sequence checked.
std::vector<SequenceMeta> read_metas(hid_t file, hsize_t n, std::int64_t seq_len, const std::string& where) {
  const std::string from_ids = fmt::format("N = {} from {}", n, kInputIds);
  const auto lengths = read_vector<std::int32_t>(file, kLengthsSpec, H5T_NATIVE_INT32, n, from_ids, where);
  const auto offsets = read_vector<std::int64_t>(file, kOffsetsSpec, H5T_NATIVE_INT64, n + 1, from_ids, where);
  check_offsets(offsets, where);
  const auto starts = read_vector<std::int32_t>(file, kStartsSpec, H5T_NATIVE_INT32,
                                                static_cast<hsize_t>(offsets.back()), "D = doc_offsets[N]", where);
  std::vector<SequenceMeta> metas(n);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    metas[i].length = lengths[i];
    metas[i].doc_starts.assign(starts.begin() + offsets[i], starts.begin() + offsets[i + 1]);
    if (std::string problem = meta_problem(metas[i], seq_len); !problem.empty())
      throw BadInput(fmt::format("{}: sequence {}: {}", where, i, problem));
  }
  return metas;
}

// The root attributes, checked: format, version, then the sizes.
ShardParams read_params(hid_t file, const std::string& where) {
  const std::string format = read_string_attr(file, kAttrFormat, where);
  if (format != kFormatName)
    throw BadInput(fmt::format("{}: format is \"{}\", not \"{}\"", where, format, kFormatName),
                   "pass a shard written by ulysses-pack");
  const std::int64_t version = read_int_attr(file, kAttrVersion, where);
  if (version != kFormatVersion)
    throw BadInput(fmt::format("{}: format_version is {}; this reader reads version {}", where, version,
                               kFormatVersion),
                   version > kFormatVersion ? "use a newer ulysses toolkit" : "re-pack the dataset");
  ShardParams p;
  p.seq_len = read_int_attr(file, kAttrSeqLen, where);
  p.sp = read_int_attr(file, kAttrSp, where);
  p.alignment = read_int_attr(file, kAttrAlignment, where);
  p.pad_id = read_int_attr(file, kAttrPadId, where);
  check_params(p, where);
  const std::int64_t chunk_len = read_int_attr(file, kAttrChunkLen, where);
  if (chunk_len <= 0 || (p.seq_len / p.sp) % chunk_len != 0)
    throw BadInput(fmt::format("{}: chunk_len ({}) does not divide seq_len / sp = {} / {}", where, chunk_len,
                               p.seq_len, p.sp));
  return p;
}

}  // namespace

std::int64_t chunk_len_for(std::int64_t seq_len, std::int64_t sp) {
  ULY_CHECK(seq_len > 0 && sp > 0 && seq_len % sp == 0, "seq_len {} and sp {}", seq_len, sp);
  const std::int64_t slice = seq_len / sp;
  std::int64_t pieces = (slice + kMaxChunkLen - 1) / kMaxChunkLen;   // fewest chunks per slice
  while (slice % pieces != 0) ++pieces;
  return slice / pieces;
}

// ---- ShardWriter -------------------------------------------------------------------------------

struct ShardWriter::Impl {
  std::string where;                           // the file, for messages
  ShardParams params;
  std::int64_t num_sequences = 0, appended = 0;
  MetaColumns columns;                         // of the sequences appended so far
  File file;
  std::optional<RawFile> raw;                  // the same file, for the token rows
  TokenDataset ids, mask;                      // [N, S] each
};

ShardWriter::ShardWriter(const std::filesystem::path& path, const ShardParams& params, std::int64_t num_sequences)
    : impl_(std::make_unique<Impl>()) {
  const QuietH5 quiet;
  Impl& w = *impl_;
  w.where = path.string();
  check_params(params, w.where);
  ULY_CHECK(num_sequences > 0, "{}: a shard holds at least one sequence (got {})", w.where, num_sequences);
  w.params = params;
  w.num_sequences = num_sequences;
  w.columns.lengths.reserve(static_cast<std::size_t>(num_sequences));
  w.columns.doc_offsets.reserve(static_cast<std::size_t>(num_sequences) + 1);
  w.file = create_shard_file(w.where);
  const auto rows = static_cast<hsize_t>(num_sequences);
  w.ids = create_tokens(w.file.get(), kInputIds, H5T_STD_I32LE, H5T_NATIVE_INT32, rows, params, w.where);
  if (params.has_loss_mask)
    w.mask = create_tokens(w.file.get(), kLossMask, H5T_STD_U8LE, H5T_NATIVE_UINT8, rows, params, w.where);
  w.raw.emplace(w.where);
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append(std::span<const std::int32_t> ids, std::span<const std::uint8_t> mask,
                         std::span<const SequenceMeta> metas) {
  const QuietH5 quiet;
  Impl& w = *impl_;
  const auto n = static_cast<std::int64_t>(metas.size());
  const std::int64_t seq_len = w.params.seq_len;
  ULY_CHECK(w.file.valid(), "{}: append after close", w.where);
  ULY_CHECK(w.appended + n <= w.num_sequences, "{}: {} + {} sequences exceed the announced {}", w.where,
            w.appended, n, w.num_sequences);
  ULY_CHECK(static_cast<std::int64_t>(ids.size()) == n * seq_len, "ids hold {} values, not {} × {}", ids.size(),
            n, seq_len);
  ULY_CHECK(static_cast<std::int64_t>(mask.size()) == (w.params.has_loss_mask ? n * seq_len : 0),
            "mask holds {} values for {} sequences (has_loss_mask = {})", mask.size(), n, w.params.has_loss_mask);
  if (n == 0) return;
  for (std::int64_t i = 0; i < n; ++i) {
    const SequenceMeta& m = metas[static_cast<std::size_t>(i)];
    const std::string problem = meta_problem(m, seq_len);
    ULY_CHECK(problem.empty(), "{}: sequence {}: {}", w.where, w.appended + i, problem);
  }
  const auto row = static_cast<hsize_t>(w.appended), rows = static_cast<hsize_t>(n);
  const auto cols = static_cast<hsize_t>(seq_len);
  write_rows(w.ids, *w.raw, row, rows, cols, ids.data(), w.where);
  if (w.params.has_loss_mask) write_rows(w.mask, *w.raw, row, rows, cols, mask.data(), w.where);
  for (const SequenceMeta& m : metas) w.columns.add(m);
  w.appended += n;
}

void ShardWriter::close() {
  const QuietH5 quiet;
  Impl& w = *impl_;
  ULY_CHECK(w.file.valid(), "{}: closed twice", w.where);
  if (w.appended != w.num_sequences)
    throw std::runtime_error(fmt::format("{}: closed after {} of the announced {} sequences", w.where,
                                         w.appended, w.num_sequences));
  write_metadata(w.file.get(), w.params, w.columns, w.where);
  w.raw->close();                        // every append's pwrite has returned
  CHECK_H5(w.where, w.ids.ds.release());
  if (w.mask.ds.valid()) CHECK_H5(w.where, w.mask.ds.release());
  CHECK_H5(w.where, w.file.release());   // flushes everything: a full disk shows up here
}

// ---- PlannedShardWriter ------------------------------------------------------------------------

struct PlannedShardWriter::Impl {
  std::string where;
  ShardParams params;
  std::int64_t num_sequences = 0, appended = 0;
  File file;                        // open until close() unless the rows are hashed as they are written
  TokenDataset ids, mask;
  std::optional<RawFile> raw;
  std::optional<Xxh3Stream> stream; // set: the file's bytes before the rows, then each row as appended
  bool closed = false;
};

PlannedShardWriter::PlannedShardWriter(const std::filesystem::path& path, const ShardParams& params,
                                       std::span<const SequenceMeta> metas)
    : impl_(std::make_unique<Impl>()) {
  const QuietH5 quiet;
  Impl& w = *impl_;
  w.where = path.string();
  check_params(params, w.where);
  ULY_CHECK(!metas.empty(), "{}: a shard holds at least one sequence", w.where);
  w.params = params;
  w.num_sequences = static_cast<std::int64_t>(metas.size());
  MetaColumns columns;
  for (const SequenceMeta& m : metas) {
    const std::string problem = meta_problem(m, params.seq_len);
    ULY_CHECK(problem.empty(), "{}: sequence {}: {}", w.where, columns.lengths.size(), problem);
    columns.add(m);
  }
  w.file = create_shard_file(w.where);
  const auto rows = static_cast<hsize_t>(w.num_sequences);
  w.ids = create_tokens(w.file.get(), kInputIds, H5T_STD_I32LE, H5T_NATIVE_INT32, rows, params, w.where);
  if (params.has_loss_mask)
    w.mask = create_tokens(w.file.get(), kLossMask, H5T_STD_U8LE, H5T_NATIVE_UINT8, rows, params, w.where);
  write_metadata(w.file.get(), params, columns, w.where);
  // Rows hashed in order as they are written need one range of rows: input_ids only, placed by us.
  // Then HDF5 has written everything else and never touches the file again.
  const bool stream_rows = w.ids.first_byte != HADDR_UNDEF && !params.has_loss_mask;
  if (stream_rows) {
    CHECK_H5(w.where, w.ids.ds.release());
    CHECK_H5(w.where, w.file.release());
  }
  w.raw.emplace(w.where);
  if (stream_rows) {
    w.stream.emplace();
    w.raw->hash_range(0, w.ids.first_byte, *w.stream);
  }
}

PlannedShardWriter::~PlannedShardWriter() = default;

void PlannedShardWriter::append(std::span<const std::int32_t> ids, std::span<const std::uint8_t> mask) {
  const QuietH5 quiet;
  Impl& w = *impl_;
  const std::int64_t seq_len = w.params.seq_len;
  ULY_CHECK(!w.closed, "{}: append after close", w.where);
  ULY_CHECK(static_cast<std::int64_t>(ids.size()) % seq_len == 0, "{}: ids hold {} values, not rows of {}",
            w.where, ids.size(), seq_len);
  const auto n = static_cast<std::int64_t>(ids.size()) / seq_len;
  ULY_CHECK(w.appended + n <= w.num_sequences, "{}: {} + {} rows exceed the {} sequences", w.where, w.appended, n,
            w.num_sequences);
  ULY_CHECK(mask.size() == (w.params.has_loss_mask ? ids.size() : 0), "{}: mask holds {} values for {} ids",
            w.where, mask.size(), ids.size());
  if (n == 0) return;
  const auto row = static_cast<hsize_t>(w.appended), rows = static_cast<hsize_t>(n);
  const auto cols = static_cast<hsize_t>(seq_len);
  write_rows(w.ids, *w.raw, row, rows, cols, ids.data(), w.where);
  if (w.params.has_loss_mask) write_rows(w.mask, *w.raw, row, rows, cols, mask.data(), w.where);
  if (w.stream) w.stream->update(ids.data(), ids.size_bytes());   // still in cache from the pwrite
  w.appended += n;
}

std::string PlannedShardWriter::close() {
  const QuietH5 quiet;
  Impl& w = *impl_;
  ULY_CHECK(!w.closed, "{}: closed twice", w.where);
  w.closed = true;
  if (w.appended != w.num_sequences)
    throw std::runtime_error(fmt::format("{}: closed after {} of the {} sequences", w.where, w.appended,
                                         w.num_sequences));
  if (w.stream) {   // the bytes after the rows: metadata HDF5 wrote in the constructor
    const std::uint64_t rows_bytes =
        static_cast<std::uint64_t>(w.num_sequences) * static_cast<std::uint64_t>(w.params.seq_len) * w.ids.token_bytes;
    const std::uint64_t rows_end = w.ids.first_byte + rows_bytes;
    w.raw->hash_range(rows_end, w.raw->size(), *w.stream);
    w.raw->close();
    return w.stream->hex();
  }
  w.raw->close();                        // every append's pwrite has returned
  CHECK_H5(w.where, w.ids.ds.release());
  if (w.mask.ds.valid()) CHECK_H5(w.where, w.mask.ds.release());
  CHECK_H5(w.where, w.file.release());   // flushes everything: a full disk shows up here
  return xxh3_file_hex(w.where);
}

// ---- ShardReader -------------------------------------------------------------------------------

struct ShardReader::Impl {
  std::string where;
  ShardParams params;
  std::vector<SequenceMeta> metas;   // [N]
  File file;
  Dataset ids, mask;                 // [N, S]; mask absent in shards without loss_mask
};

ShardReader::ShardReader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  const QuietH5 quiet;
  Impl& r = *impl_;
  r.where = path.string();
  if (!std::filesystem::is_regular_file(path))
    throw BadInput(fmt::format("shard {} does not exist or is not a file", r.where));
  Plist fapl = file_access(r.where);
  r.file = File(CHECK_H5_INPUT(r.where, H5Fopen(r.where.c_str(), H5F_ACC_RDONLY, fapl.get())));
  const hid_t f = r.file.get();
  r.params = read_params(f, r.where);
  const auto seq_len = static_cast<hsize_t>(r.params.seq_len);

  std::vector<hsize_t> dims;
  r.ids = open_dataset(f, kIdsSpec, dims, r.where);
  if (dims.size() != 2 || dims[1] != seq_len)
    throw BadInput(fmt::format("{}: dataset \"{}\" has shape [{}], expected [N, {}] (seq_len)", r.where,
                               kInputIds, fmt::join(dims, ", "), seq_len));
  const hsize_t n = dims[0];
  r.params.has_loss_mask = CHECK_H5_INPUT(r.where, H5Lexists(f, kLossMask, H5P_DEFAULT)) > 0;
  if (r.params.has_loss_mask) {
    r.mask = open_dataset(f, kMaskSpec, dims, r.where);
    check_shape(kMaskSpec, dims, {n, seq_len}, std::string("the shape of ") + kInputIds, r.where);
  }
  r.metas = read_metas(f, n, r.params.seq_len, r.where);
}

ShardReader::~ShardReader() = default;
ShardReader::ShardReader(ShardReader&&) noexcept = default;

const ShardParams& ShardReader::params() const { return impl_->params; }
std::int64_t ShardReader::num_sequences() const { return static_cast<std::int64_t>(impl_->metas.size()); }

const SequenceMeta& ShardReader::meta(std::int64_t seq) const {
  ULY_CHECK(seq >= 0 && seq < num_sequences(), "{}: sequence {} of {}", impl_->where, seq, num_sequences());
  return impl_->metas[static_cast<std::size_t>(seq)];
}

void ShardReader::read(std::int64_t seq, std::int64_t begin, std::int64_t n, std::int32_t* ids,
                       std::uint8_t* mask) const {
  const Impl& r = *impl_;
  ULY_CHECK(seq >= 0 && seq < num_sequences(), "{}: sequence {} of {}", r.where, seq, num_sequences());
  ULY_CHECK(begin >= 0 && n >= 0 && begin + n <= r.params.seq_len, "{}: tokens [{}, {}) outside [0, {})", r.where,
            begin, begin + n, r.params.seq_len);
  if (n == 0) return;
  const QuietH5 quiet;
  const hsize_t mem_dims[1] = {static_cast<hsize_t>(n)};
  Space mem_space(CHECK_H5(r.where, H5Screate_simple(1, mem_dims, nullptr)));
  const auto row = static_cast<hsize_t>(seq), col = static_cast<hsize_t>(begin), cols = static_cast<hsize_t>(n);
  Space ids_space = select_block(r.ids.get(), row, col, 1, cols, r.where);
  CHECK_H5(r.where, H5Dread(r.ids.get(), H5T_NATIVE_INT32, mem_space.get(), ids_space.get(), H5P_DEFAULT, ids));
  if (mask == nullptr) return;
  if (!r.mask.valid()) {
    std::fill_n(mask, n, std::uint8_t{1});
    return;
  }
  Space mask_space = select_block(r.mask.get(), row, col, 1, cols, r.where);
  CHECK_H5(r.where, H5Dread(r.mask.get(), H5T_NATIVE_UINT8, mem_space.get(), mask_space.get(), H5P_DEFAULT, mask));
}

}  // namespace ulysses::shard

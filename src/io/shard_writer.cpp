// ShardWriter and PlannedShardWriter over the HDF5 C API (format: shard_format.hpp; public spec:
// docs/data-format.md).
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
#include "io/shard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <hdf5.h>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "io/h5.hpp"
#include "io/shard_format.hpp"
#include "io/shard_schema.hpp"

namespace ulysses::shard {
namespace {

using namespace h5;
using namespace detail;

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

// A fixed-length ASCII string (h5py reads it as bytes): its value sits in the attribute itself. A variable-length
// one lives in HDF5's global heap, and reading that from a crafted file crashes or hangs inside libhdf5.
void write_string_attr(hid_t file, const char* name, const std::string& value, const std::string& where) {
  Type type(CHECK_H5(where, H5Tcopy(H5T_C_S1)));
  CHECK_H5(where, H5Tset_size(type.get(), value.size()));
  CHECK_H5(where, H5Tset_strpad(type.get(), H5T_STR_NULLPAD));
  Space space(CHECK_H5(where, H5Screate(H5S_SCALAR)));
  Attr attr(CHECK_H5(where, H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  CHECK_H5(where, H5Awrite(attr.get(), type.get(), value.data()));
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

}  // namespace

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

}  // namespace ulysses::shard

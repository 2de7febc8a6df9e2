// ShardReader over the HDF5 C API (format: shard_format.hpp; public spec: docs/data-format.md).
//
// Reader: checks format, version, sizes, dtypes and the document CSR at open, before trusting the
// payload (BadInput naming the file and the numbers), keeps the metadata in memory, and reads exactly
// the requested hyperslab (chunk cache off here too: the +1 token is a small read, not a whole chunk).
// Every HDF5 call is checked: an I/O failure throws std::runtime_error, a malformed file BadInput, both
// with the file, the call and HDF5's innermost message. HDF5's own printing to stderr is silenced for
// the duration of each public call (per thread: the error stack is thread-local in the thread-safe build).
#include "io/shard.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "io/h5.hpp"
#include "io/shard_format.hpp"
#include "io/shard_schema.hpp"

namespace ulysses::shard {
namespace {

using namespace h5;
using namespace detail;

constexpr const char* kNotOurShard = "pass a shard written by ulysses-pack (ulysses-pack verify checks a dataset; "
                                     "pack it again if it is damaged)";

Attr open_attr(hid_t file, const char* name, const std::string& where) {
  if (CHECK_H5_INPUT(where, H5Aexists(file, name)) == 0)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is missing", where, name),
                   "not a complete ulysses-packed shard (written by ulysses-pack, closed properly)");
  Attr attr(CHECK_H5_INPUT(where, H5Aopen(file, name, H5P_DEFAULT)));
  Space space(CHECK_H5_INPUT(where, H5Aget_space(attr.get())));
  if (CHECK_H5_INPUT(where, H5Sget_simple_extent_npoints(space.get())) != 1)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is not a scalar", where, name), kNotOurShard);
  return attr;
}

H5T_class_t attr_class(hid_t attr, const std::string& where) {
  Type type(CHECK_H5_INPUT(where, H5Aget_type(attr)));
  return H5Tget_class(type.get());
}

std::int64_t read_int_attr(hid_t file, const char* name, const std::string& where) {
  Attr attr = open_attr(file, name, where);
  if (attr_class(attr.get(), where) != H5T_INTEGER)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is not an integer", where, name), kNotOurShard);
  std::int64_t value = 0;
  CHECK_H5_INPUT(where, H5Aread(attr.get(), H5T_NATIVE_INT64, &value));
  return value;
}

// A fixed-length string (what ulysses-pack writes; h5py bytes), trailing NULs/spaces dropped. A variable-length
// one (older packs, h5py str) is not read: its bytes live in HDF5's global heap, and H5Aread of a crafted one
// crashes (H5HG_read) or hangs (H5HG__protect) inside libhdf5. nullopt then; the integer attributes and the
// datasets' exact dtypes and shapes still identify the format.
std::optional<std::string> read_string_attr(hid_t file, const char* name, const std::string& where) {
  Attr attr = open_attr(file, name, where);
  if (attr_class(attr.get(), where) != H5T_STRING)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is not a string", where, name), kNotOurShard);
  Type file_type(CHECK_H5_INPUT(where, H5Aget_type(attr.get())));
  if (CHECK_H5_INPUT(where, H5Tis_variable_str(file_type.get())) > 0) return std::nullopt;
  const std::size_t size = H5Tget_size(file_type.get());
  if (size == 0 || size > 4096)
    throw BadInput(fmt::format("{}: root attribute \"{}\" is a string of {} bytes", where, name, size), kNotOurShard);
  std::string out(size, '\0');
  CHECK_H5_INPUT(where, H5Aread(attr.get(), file_type.get(), out.data()));
  out.erase(out.find_last_not_of(std::string_view("\0 ", 2)) + 1);
  return out;
}

// The dataset's bytes are in this file, unfiltered: HDF5 can also link a name to another file (external links),
// map a dataset onto other files (external storage, virtual datasets) or filter it (a deflate bomb) — a hostile
// shard would read /etc/passwd or a FIFO, or decompress gigabytes per row. None of that is our format.
void check_storage(hid_t ds, const IntSpec& spec, const std::string& where) {
  Plist dcpl(CHECK_H5_INPUT(where, H5Dget_create_plist(ds)));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL || layout < 0 ||
      CHECK_H5_INPUT(where, H5Pget_external_count(dcpl.get())) != 0 || CHECK_H5_INPUT(where, H5Pget_nfilters(dcpl.get())) != 0)
    throw BadInput(fmt::format("{}: dataset \"{}\" is not stored in the file itself without filters (a link, external "
                               "or virtual storage, or compression)", where, spec.name),
                   kNotOurShard);
}

// Opens dataset spec.name, checks its storage and dtype, and returns it with its dims.
Dataset open_dataset(hid_t file, const IntSpec& spec, std::vector<hsize_t>& dims, const std::string& where) {
  if (CHECK_H5_INPUT(where, H5Lexists(file, spec.name, H5P_DEFAULT)) == 0)
    throw BadInput(fmt::format("{}: dataset \"{}\" is missing", where, spec.name), kNotOurShard);
  H5L_info_t link{};
  CHECK_H5_INPUT(where, H5Lget_info(file, spec.name, &link, H5P_DEFAULT));
  if (link.type != H5L_TYPE_HARD)   // before H5Dopen2, which would follow an external link to another file
    throw BadInput(fmt::format("{}: \"{}\" is a link to elsewhere, not a dataset of this file", where, spec.name),
                   kNotOurShard);
  Plist dapl = uncached_dataset_access(where);
  Dataset ds(CHECK_H5_INPUT(where, H5Dopen2(file, spec.name, dapl.get())));
  check_storage(ds.get(), spec, where);
  Type type(CHECK_H5_INPUT(where, H5Dget_type(ds.get())));
  const bool ok = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == spec.bytes &&
                  (H5Tget_sign(type.get()) == H5T_SGN_2) == spec.is_signed;
  if (!ok) throw BadInput(fmt::format("{}: dataset \"{}\" must have dtype {}", where, spec.name, spec.dtype),
                          kNotOurShard);
  Space space(CHECK_H5_INPUT(where, H5Dget_space(ds.get())));
  dims.resize(static_cast<std::size_t>(CHECK_H5_INPUT(where, H5Sget_simple_extent_ndims(space.get()))));
  CHECK_H5_INPUT(where, H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  return ds;
}

void check_shape(const IntSpec& spec, const std::vector<hsize_t>& dims, const std::vector<hsize_t>& want,
                 const std::string& why, const std::string& where) {
  if (dims != want)
    throw BadInput(fmt::format("{}: dataset \"{}\" has shape [{}], expected [{}] ({})", where, spec.name,
                               fmt::join(dims, ", "), fmt::join(want, ", "), why), kNotOurShard);
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
    throw BadInput(fmt::format("{}: {}[0] is {}, not 0", where, kDocOffsets, offsets.front()), kNotOurShard);
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
    if (offsets[i + 1] < offsets[i])
      throw BadInput(fmt::format("{}: {} decreases at sequence {} ({} then {})", where, kDocOffsets, i,
                                 offsets[i], offsets[i + 1]), kNotOurShard);
}

// input_ids [N, S] is int32 with no filter (docs/data-format.md), so N·S·4 bytes must be in the file: a crafted
// shard of 7 KB declaring 2^30 rows would otherwise make the metadata readers allocate 12 GB.
void check_declared_rows(hsize_t n, hsize_t seq_len, std::uintmax_t file_bytes, const std::string& where) {
  if (n > file_bytes / (seq_len * sizeof(std::int32_t)))
    throw BadInput(fmt::format("{}: {} declares {} sequences of {} int32 tokens but the file holds only {} bytes",
                               where, kInputIds, n, seq_len, file_bytes),
                   "the shard is truncated or damaged: re-pack the dataset");
}

// The metadata datasets (seq_lengths [N], doc_offsets [N + 1], doc_starts [D]), each sequence checked.
std::vector<SequenceMeta> read_metas(hid_t file, hsize_t n, std::int64_t seq_len, const std::string& where) {
  const std::string from_ids = fmt::format("N = {} from {}", n, kInputIds);
  const auto lengths = read_vector<std::int32_t>(file, kLengthsSpec, H5T_NATIVE_INT32, n, from_ids, where);
  const auto offsets = read_vector<std::int64_t>(file, kOffsetsSpec, H5T_NATIVE_INT64, n + 1, from_ids, where);
  check_offsets(offsets, where);
  if (offsets.back() > static_cast<std::int64_t>(n) * seq_len)   // each document starts at its own token
    throw BadInput(fmt::format("{}: {} declares {} documents in {} sequences of {} tokens", where, kDocOffsets,
                               offsets.back(), n, seq_len), kNotOurShard);
  const auto starts = read_vector<std::int32_t>(file, kStartsSpec, H5T_NATIVE_INT32,
                                                static_cast<hsize_t>(offsets.back()), "D = doc_offsets[N]", where);
  std::vector<SequenceMeta> metas(n);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    metas[i].length = lengths[i];
    metas[i].doc_starts.assign(starts.begin() + offsets[i], starts.begin() + offsets[i + 1]);
    if (std::string problem = meta_problem(metas[i], seq_len); !problem.empty())
      throw BadInput(fmt::format("{}: sequence {}: {}", where, i, problem), kNotOurShard);
  }
  return metas;
}

// The root attributes, checked: format, version, then the sizes.
ShardParams read_params(hid_t file, const std::string& where) {
  const std::optional<std::string> format = read_string_attr(file, kAttrFormat, where);
  if (format && *format != kFormatName)
    throw BadInput(fmt::format("{}: format is \"{}\", not \"{}\"", where, printable(*format), kFormatName),
                   kNotOurShard);
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
                               p.seq_len, p.sp), kNotOurShard);
  return p;
}

}  // namespace

// ---- ShardReader -------------------------------------------------------------------------------

struct ShardReader::Impl {
  std::string where;
  ShardParams params;
  std::vector<SequenceMeta> metas;   // [N]
  File file;
  Dataset ids, mask;                 // [N, S]; mask absent in shards without loss_mask
  int fd = -1;                       // the file HDF5 opened, for its size as it is read
  std::uintmax_t bytes = 0;          // its size at open
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// The file's size now against its size at open, after a read: HDF5 returns zeros for what lies past the end of a
// file cut short under it, and says nothing.
void check_not_truncated(int fd, std::uintmax_t bytes_at_open, const std::string& where, std::int64_t seq) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error(fmt::format("{}: fstat failed while reading it", where));
  if (static_cast<std::uintmax_t>(st.st_size) < bytes_at_open)
    throw BadInput(fmt::format("{}: {} bytes while sequence {} was read, {} when it was opened: the shard was "
                               "truncated", where, st.st_size, seq, bytes_at_open),
                   "the dataset changed while it was read: restore it (ulysses-pack verify checks it) and run again");
}

// A read of sequence `seq`, then the file's size checked; an HDF5 failure of a file that shrank is said as that.
template <typename Read>
void read_checked(int fd, std::uintmax_t bytes_at_open, const std::string& where, std::int64_t seq, const Read& read) {
  try {
    read();
  } catch (const std::runtime_error&) {
    check_not_truncated(fd, bytes_at_open, where, seq);
    throw;
  }
  check_not_truncated(fd, bytes_at_open, where, seq);
}

}  // namespace

ShardReader::ShardReader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  const QuietH5 quiet;
  Impl& r = *impl_;
  r.where = path.string();
  if (!std::filesystem::is_regular_file(path))
    throw BadInput(fmt::format("shard {} does not exist or is not a file", r.where),
                   "run ulysses-pack verify on the dataset; pack it again if shards are missing");
  r.fd = open_regular_file(path, "shard");
  struct stat st {};
  if (::fstat(r.fd, &st) != 0) throw std::runtime_error(fmt::format("{}: fstat failed", r.where));
  r.bytes = static_cast<std::uintmax_t>(st.st_size);
  Plist fapl = file_access(r.where);
  r.file = File(CHECK_H5_INPUT(r.where, H5Fopen(r.where.c_str(), H5F_ACC_RDONLY, fapl.get())));
  const hid_t f = r.file.get();
  r.params = read_params(f, r.where);
  const auto seq_len = static_cast<hsize_t>(r.params.seq_len);

  std::vector<hsize_t> dims;
  r.ids = open_dataset(f, kIdsSpec, dims, r.where);
  if (dims.size() != 2 || dims[1] != seq_len)
    throw BadInput(fmt::format("{}: dataset \"{}\" has shape [{}], expected [N, {}] (seq_len)", r.where,
                               kInputIds, fmt::join(dims, ", "), seq_len), kNotOurShard);
  const hsize_t n = dims[0];
  check_declared_rows(n, seq_len, r.bytes, r.where);
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
const std::string& ShardReader::path() const { return impl_->where; }
std::uintmax_t ShardReader::bytes() const { return impl_->bytes; }
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
  read_checked(r.fd, r.bytes, r.where, seq, [&] {
    CHECK_H5(r.where, H5Dread(r.ids.get(), H5T_NATIVE_INT32, mem_space.get(), ids_space.get(), H5P_DEFAULT, ids));
  });
  if (mask == nullptr) return;
  if (!r.mask.valid()) {
    std::fill_n(mask, n, std::uint8_t{1});
    return;
  }
  Space mask_space = select_block(r.mask.get(), row, col, 1, cols, r.where);
  read_checked(r.fd, r.bytes, r.where, seq, [&] {
    CHECK_H5(r.where, H5Dread(r.mask.get(), H5T_NATIVE_UINT8, mem_space.get(), mask_space.get(), H5P_DEFAULT, mask));
  });
}

}  // namespace ulysses::shard

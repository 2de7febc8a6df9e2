// Reading and writing one packed shard (format: shard_format.hpp, docs/data-format.md).
// Torch-free and MPI-free. Every HDF5 call is checked; failures throw with the file name: BadInput for a
// malformed or incompatible file (or bad ShardParams), std::runtime_error for an I/O failure, and
// std::logic_error (ULY_CHECK) for a caller breaking the contract (sizes, ranges, invalid metadata).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ulysses::shard {

struct ShardParams {
  std::int64_t seq_len = 0;
  std::int64_t sp = 1;
  std::int64_t alignment = 64;
  std::int64_t pad_id = 0;
  bool has_loss_mask = false;
};

// tokens per HDF5 chunk along the sequence: the largest divisor of seq_len/sp that is <= 65536
// (so SP rank r's slice is whole chunks, and its +1 label token costs at most one extra chunk).
std::int64_t chunk_len_for(std::int64_t seq_len, std::int64_t sp);

// The per-sequence metadata the loader needs besides tokens.
struct SequenceMeta {
  std::int32_t length = 0;                 // non-pad tokens; [length, seq_len) is padding
  std::vector<std::int32_t> doc_starts;    // ascending, first is 0
};

class ShardWriter {
 public:
  // Creates `path` (truncating) for exactly num_sequences (>= 1) sequences. BadInput unless
  // seq_len % (sp * alignment) == 0.
  ShardWriter(const std::filesystem::path& path, const ShardParams& params, std::int64_t num_sequences);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends n = metas.size() sequences. ids: [n, seq_len] row-major; mask: [n, seq_len] or empty
  // (required iff params.has_loss_mask). Each meta: 1 <= length <= seq_len, doc_starts ascending from 0
  // and below length. The token rows bypass HDF5 (pwrite at their place in the file), so appends to
  // different writers on different threads run in parallel.
  void append(std::span<const std::int32_t> ids, std::span<const std::uint8_t> mask,
              std::span<const SequenceMeta> metas);
  // Writes the metadata datasets, then the root attributes (a file without them is incomplete), and
  // closes the file; throws if fewer sequences than announced were appended.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A shard whose metadata is known before its tokens (ulysses-pack computes every sequence's length and
// document starts from its plan). The constructor writes the whole HDF5 file except the token rows:
// token datasets (chunks allocated, never filled), metadata datasets, root attributes — and, when the
// rows of input_ids are one byte range and there is no loss mask, closes HDF5 there and then. append()
// writes the next rows with pwrite and feeds them to the file's XXH3-64 while they are still in cache,
// so close() returns the checksum of the finished file without reading it back (only the bytes before
// and after the rows, read from the file). Otherwise append() writes as ShardWriter does and close()
// hashes the finished file. The file's format is ShardWriter's; its bytes depend only on its content.
// Until close() returns the file is incomplete although its attributes are written: write it inside
// an output directory that is committed only when every shard is closed (core/output_dir.hpp).
class PlannedShardWriter {
 public:
  // metas: every sequence of the shard (>= 1), each valid for params.seq_len (std::logic_error if not).
  PlannedShardWriter(const std::filesystem::path& path, const ShardParams& params,
                     std::span<const SequenceMeta> metas);
  ~PlannedShardWriter();
  PlannedShardWriter(const PlannedShardWriter&) = delete;
  PlannedShardWriter& operator=(const PlannedShardWriter&) = delete;

  // The next ids.size() / seq_len rows, in order: ids [n, seq_len], mask [n, seq_len] or empty
  // (required iff params.has_loss_mask). Appends to different writers may run on different threads.
  void append(std::span<const std::int32_t> ids, std::span<const std::uint8_t> mask);
  // Closes the file (throws if fewer rows than sequences were appended) and returns its XXH3-64 as
  // 16 hex digits, the manifest's checksum.
  std::string close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Different ShardReader objects may be used on different threads (and read() is const): the
// thread-safe HDF5 library serialises their calls.
class ShardReader {
 public:
  explicit ShardReader(const std::filesystem::path& path);   // checks format, version, shapes → BadInput
  ~ShardReader();
  ShardReader(ShardReader&&) noexcept;

  const ShardParams& params() const;
  const std::string& path() const;      // as given, for messages
  std::uintmax_t bytes() const;         // the file's size at open
  std::int64_t num_sequences() const;
  const SequenceMeta& meta(std::int64_t seq) const;   // all metadata is read at open (small)

  // Tokens [begin, begin + n) of sequence `seq` (n may run to seq_len). mask: n bytes or nullptr;
  // a shard without loss_mask yields all ones. BadInput when the file is shorter now than at open (truncated
  // under the reader: HDF5 would have returned zeros for the part past its end).
  void read(std::int64_t seq, std::int64_t begin, std::int64_t n, std::int32_t* ids, std::uint8_t* mask) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ulysses::shard

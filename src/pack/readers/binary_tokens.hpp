// Tokens of binary files (Megatron .bin, llm.c shards, flat token files), read in place.
//
// Token i of a stream is at byte first_byte + i * token_bytes(type) of its file. scan_tokens() walks a
// range through mapped windows (no copy into user memory) in L2-sized blocks, spread over
// check.threads workers: each block is checked (integral, >= 0, < vocab size, fits int32), searched
// for the EOS id, and fed to the file's FileHasher while it is still in cache, in file order. Its
// results (EOS positions in order, max_id, the FIRST bad byte offset) do not depend on the thread
// count. scan_split_stream() also cuts the stream into documents at an EOS id. BinaryTokenSource
// reads checked ranges back with pread (thread-safe) and converts them to int32; it has no loss mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/checksum.hpp"
#include "pack/corpus.hpp"
#include "pack/readers/input_file.hpp"
#include "pack/readers/readers.hpp"
#include "pack/readers/token_types.hpp"

namespace ulysses::pack {

class BinaryTokenSource final : public TokenSource {
 public:
  BinaryTokenSource(InputFile file, TokenType type, std::uint64_t first_byte)
      : file_(std::move(file)), type_(type), first_byte_(first_byte) {}
  const std::string& name() const override { return file_.name(); }
  bool has_loss_mask() const override { return false; }
  void read(std::uint64_t offset, std::uint32_t n, std::int32_t* ids, std::uint8_t* mask) const override;

 private:
  InputFile file_;
  TokenType type_;
  std::uint64_t first_byte_;
};

// XXH3-64 of every byte of a file, fed by the scans in file order: bytes the scans skip (headers, gaps)
// are read from the file, bytes fed twice are hashed once, so finish() is the hash of the whole file
// whatever was fed.
class FileHasher {
 public:
  explicit FileHasher(const InputFile& file) : file_(file) {}
  void update(std::uint64_t offset, const std::byte* data, std::size_t n);   // bytes [offset, offset + n)
  std::string finish();   // 16 hex digits

 private:
  void hash_from_file(std::uint64_t end);   // bytes [hashed_, end)
  const InputFile& file_;
  Xxh3Stream stream_;
  std::uint64_t hashed_ = 0;   // bytes [0, hashed_) are in stream_
};

struct TokenCheck {
  std::int64_t vocab_size = 0;   // > 0: every id must be below it
  std::int64_t eos_id = -1;      // >= 0: report every token equal to it
  int threads = 1;               // workers sharing the blocks of the range
};

// Called in ascending order with the index (in the scanned range) of every token equal to eos_id.
using EosFn = std::function<void(std::uint64_t index)>;

// Checks `count` tokens from byte `first_byte`: BadInput naming the byte offset of the first bad id.
// Raises max_id to the largest id.
void scan_tokens(const InputFile& file, TokenType type, std::uint64_t first_byte, std::uint64_t count,
                 const TokenCheck& check, FileHasher& hasher, std::int64_t& max_id,
                 const EosFn& on_eos = nullptr);

// Checks a stream of `count` tokens from byte `first_byte` and records its documents: the whole
// stream when eos_id < 0, else split at every eos_id — the EOS ends a document (kAfterEos: tokens
// after the last EOS form a final document) or starts one (kBeforeEos: tokens before the first EOS
// form the first). BadInput if eos_id cannot occur in `type`. Sets the sink's checksum to the file's.
void scan_split_stream(const InputFile& file, TokenType type, std::uint64_t first_byte,
                       std::uint64_t count, std::int64_t eos_id, SplitAt split_at,
                       const ReaderOptions& options, DocSink& sink);

}  // namespace ulysses::pack

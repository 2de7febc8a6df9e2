// Tokens of binary files (Megatron .bin, llm.c shards, flat token files), read in place.
//
// Token i of a stream is at byte first_byte + i * token_bytes(type) of its file. scan_tokens() reads
// a range in 1 MiB blocks and checks every id (integral, >= 0, < vocab size, fits int32);
// scan_split_stream() also cuts the stream into documents at an EOS id. BinaryTokenSource reads
// checked ranges back with pread (thread-safe) and converts them to int32; it has no loss mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

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

// Called with each checked block: the index of its first token in the scanned range, its bytes and
// its token count.
using TokenBlockFn = std::function<void(std::uint64_t first, const std::byte* block, std::size_t n)>;

// Checks `count` tokens from byte `first_byte`: BadInput naming the byte offset of the first bad id.
// Raises max_id to the largest id.
void scan_tokens(const InputFile& file, TokenType type, std::uint64_t first_byte, std::uint64_t count,
                 std::int64_t vocab_size, std::int64_t& max_id, const TokenBlockFn& on_block = nullptr);

// Checks a stream of `count` tokens from byte `first_byte` and records its documents: the whole
// stream when eos_id < 0, else split at every eos_id — the EOS ends a document (kAfterEos: tokens
// after the last EOS form a final document) or starts one (kBeforeEos: tokens before the first EOS
// form the first). BadInput if eos_id cannot occur in `type`.
void scan_split_stream(const InputFile& file, TokenType type, std::uint64_t first_byte,
                       std::uint64_t count, std::int64_t eos_id, SplitAt split_at,
                       std::int64_t vocab_size, DocSink& sink);

}  // namespace ulysses::pack

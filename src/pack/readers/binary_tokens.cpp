#include "pack/readers/binary_tokens.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace ulysses::pack {
namespace {

constexpr std::size_t kScanBlockBytes = std::size_t{1} << 20;   // fits in L2: checked, then searched
constexpr std::size_t kReadChunkTokens = std::size_t{1} << 16;

}  // namespace

void BinaryTokenSource::read(std::uint64_t offset, std::uint32_t n, std::int32_t* ids,
                             std::uint8_t* mask) const {
  const std::size_t size = token_bytes(type_);
  if (size == sizeof(std::int32_t)) {   // int32/uint32/float32: read in place
    file_.read_exact(first_byte_ + offset * size, ids, std::size_t{n} * size);
    // int32/uint32 ids were checked to lie in [0, 2^31) during the scan: their bits are already int32
    if (type_ == TokenType::kF32) convert_tokens(type_, reinterpret_cast<const std::byte*>(ids), n, ids);
  } else {
    thread_local std::vector<std::byte> buffer;   // one per pass-2 worker: no allocation per piece
    buffer.resize(std::min<std::size_t>(n, kReadChunkTokens) * size);
    for (std::size_t done = 0; done < n;) {
      const std::size_t m = std::min<std::size_t>(kReadChunkTokens, n - done);
      file_.read_exact(first_byte_ + (offset + done) * size, buffer.data(), m * size);
      convert_tokens(type_, buffer.data(), m, ids + done);
      done += m;
    }
  }
  if (mask != nullptr) std::fill_n(mask, n, std::uint8_t{1});
}

void scan_tokens(const InputFile& file, TokenType type, std::uint64_t first_byte, std::uint64_t count,
                 std::int64_t vocab_size, std::int64_t& max_id, const TokenBlockFn& on_block) {
  const std::size_t size = token_bytes(type);
  const std::size_t block_tokens = kScanBlockBytes / size;
  const std::int64_t limit = id_limit(vocab_size);
  const auto block = std::make_unique_for_overwrite<std::byte[]>(
      std::min<std::uint64_t>(count, block_tokens) * size);
  for (std::uint64_t done = 0; done < count;) {
    const std::size_t n = std::min<std::uint64_t>(block_tokens, count - done);
    const std::uint64_t byte = first_byte + done * size;
    file.read_exact(byte, block.get(), n * size);
    const std::size_t bad = check_tokens(type, block.get(), n, limit, max_id);
    if (bad < n) {
      throw BadInput(fmt::format("{}: byte offset {}: {} ({} tokens)", file.name(), byte + bad * size,
                                 describe_bad_token(type, block.get() + bad * size, vocab_size),
                                 token_type_name(type)),
                     "ids must be integers in [0, vocab size); check --vocab-size, the tokenizer that "
                     "wrote the file, and that the file is not corrupt");
    }
    if (on_block) on_block(done, block.get(), n);
    done += n;
  }
}

void scan_split_stream(const InputFile& file, TokenType type, std::uint64_t first_byte,
                       std::uint64_t count, std::int64_t eos_id, SplitAt split_at,
                       std::int64_t vocab_size, DocSink& sink) {
  std::int64_t& max_id = sink.stats().max_id;
  if (eos_id < 0) {
    scan_tokens(file, type, first_byte, count, vocab_size, max_id);
    sink.add(0, count);
    return;
  }
  if (eos_id > token_type_max(type)) {
    throw BadInput(fmt::format("{}: EOS id {} cannot occur in {} tokens (max {})", file.name(), eos_id,
                               token_type_name(type), token_type_max(type)),
                   "pass --eos-id with the end-of-text id of the tokenizer that wrote the file");
  }
  std::uint64_t doc_start = 0;
  std::vector<std::size_t> hits;
  scan_tokens(file, type, first_byte, count, vocab_size, max_id,
              [&](std::uint64_t first, const std::byte* block, std::size_t n) {
                hits.clear();
                find_token(type, block, n, eos_id, hits);
                for (const std::size_t hit : hits) {
                  const std::uint64_t eos = first + hit;
                  const std::uint64_t end = split_at == SplitAt::kAfterEos ? eos + 1 : eos;
                  if (end > doc_start) sink.add(doc_start, end - doc_start);
                  doc_start = end;
                }
              });
  if (count > doc_start) sink.add(doc_start, count - doc_start);
}

}  // namespace ulysses::pack

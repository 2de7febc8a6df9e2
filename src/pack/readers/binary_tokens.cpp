#include "pack/readers/binary_tokens.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace ulysses::pack {
namespace {

constexpr std::size_t kWindowBytes = std::size_t{64} << 20;   // mapped at a time: bounds resident memory
constexpr std::size_t kBlockBytes = std::size_t{256} << 10;   // fits in L2: checked, searched, hashed
constexpr std::size_t kGapChunkBytes = std::size_t{1} << 20;  // bytes the scans skip, hashed by pread
constexpr std::size_t kReadChunkTokens = std::size_t{1} << 16;

// What the scan of one block found.
struct BlockResult {
  std::size_t bad = 0;              // index of the first bad token; the block's token count if none
  std::int64_t max_id = -1;
  std::vector<std::size_t> hits;    // indices of EOS tokens in the block
};

[[noreturn]] void throw_bad_token(const InputFile& file, TokenType type, std::uint64_t byte,
                                  const std::byte* token, std::int64_t vocab_size) {
  throw BadInput(fmt::format("{}: byte offset {}: {} ({} tokens)", file.name(), byte,
                             describe_bad_token(type, token, vocab_size), token_type_name(type)),
                 "ids must be integers in [0, vocab size); check --vocab-size, the tokenizer that "
                 "wrote the file, and that the file is not corrupt");
}

// Scans the n tokens of one mapped window (first token at file byte `byte`) into blocks[0, nblocks):
// blocks are checked and searched in parallel, then hashed in order (each waits for the previous).
void scan_window(const std::byte* data, std::uint64_t byte, std::size_t n, TokenType type,
                 const TokenCheck& check, FileHasher& hasher, std::vector<BlockResult>& blocks) {
  const std::size_t size = token_bytes(type);
  const std::size_t block_tokens = kBlockBytes / size;
  const std::int64_t limit = id_limit(check.vocab_size);
  const std::size_t nblocks = (n + block_tokens - 1) / block_tokens;
  std::atomic<std::size_t> turn{0};   // the next block to hash
  parallel_for(nblocks, check.threads, [&](std::size_t b) {
    const std::byte* block = data + b * block_tokens * size;
    const std::size_t m = std::min(block_tokens, n - b * block_tokens);
    BlockResult& r = blocks[b];
    r.max_id = -1;
    r.hits.clear();
    r.bad = check_tokens(type, block, m, limit, r.max_id);
    if (check.eos_id >= 0) find_token(type, block, m, check.eos_id, r.hits);
    for (std::size_t t = turn.load(); t != b; t = turn.load()) turn.wait(t);
    hasher.update(byte + b * block_tokens * size, block, m * size);
    turn.store(b + 1);
    turn.notify_all();
  });
}

}  // namespace

void FileHasher::update(std::uint64_t offset, const std::byte* data, std::size_t n) {
  if (offset > hashed_) hash_from_file(offset);
  const std::uint64_t end = offset + n;
  if (end <= hashed_) return;
  const std::uint64_t skip = hashed_ - offset;
  stream_.update(data + skip, static_cast<std::size_t>(n - skip));
  hashed_ = end;
}

std::string FileHasher::finish() {
  hash_from_file(file_.size());
  return stream_.hex();
}

void FileHasher::hash_from_file(std::uint64_t end) {
  if (end <= hashed_) return;
  std::vector<std::byte> chunk(std::min<std::uint64_t>(kGapChunkBytes, end - hashed_));
  while (hashed_ < end) {
    const std::size_t n = std::min<std::uint64_t>(chunk.size(), end - hashed_);
    file_.read_exact(hashed_, chunk.data(), n);
    stream_.update(chunk.data(), n);
    hashed_ += n;
  }
}

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
                 const TokenCheck& check, FileHasher& hasher, std::int64_t& max_id, const EosFn& on_eos) {
  const std::size_t size = token_bytes(type);
  const std::size_t window_tokens = kWindowBytes / size;
  const std::size_t block_tokens = kBlockBytes / size;
  std::vector<BlockResult> blocks((std::min<std::uint64_t>(count, window_tokens) + block_tokens - 1) /
                                  block_tokens);
  for (std::uint64_t done = 0; done < count;) {
    const std::size_t n = std::min<std::uint64_t>(window_tokens, count - done);
    const std::uint64_t byte = first_byte + done * size;
    const MappedRange window(file, byte, n * size);
    scan_window(window.data(), byte, n, type, check, hasher, blocks);
    for (std::size_t b = 0; b * block_tokens < n; ++b) {   // merge in file order
      const BlockResult& r = blocks[b];
      const std::size_t first = b * block_tokens;
      if (r.bad < std::min(block_tokens, n - first)) {
        throw_bad_token(file, type, byte + (first + r.bad) * size, window.data() + (first + r.bad) * size,
                        check.vocab_size);
      }
      max_id = std::max(max_id, r.max_id);
      if (on_eos)
        for (const std::size_t hit : r.hits) on_eos(done + first + hit);
    }
    done += n;
  }
}

void scan_split_stream(const InputFile& file, TokenType type, std::uint64_t first_byte,
                       std::uint64_t count, std::int64_t eos_id, SplitAt split_at,
                       const ReaderOptions& options, DocSink& sink) {
  if (eos_id > token_type_max(type)) {
    throw BadInput(fmt::format("{}: EOS id {} cannot occur in {} tokens (max {})", file.name(), eos_id,
                               token_type_name(type), token_type_max(type)),
                   "pass --eos-id with the end-of-text id of the tokenizer that wrote the file");
  }
  FileHasher hasher(file);
  const TokenCheck check{options.vocab_size, eos_id, options.threads};
  std::int64_t& max_id = sink.stats().max_id;
  if (eos_id < 0) {
    scan_tokens(file, type, first_byte, count, check, hasher, max_id);
    sink.add(0, count);
  } else {
    std::uint64_t doc_start = 0;
    scan_tokens(file, type, first_byte, count, check, hasher, max_id, [&](std::uint64_t eos) {
      const std::uint64_t end = split_at == SplitAt::kAfterEos ? eos + 1 : eos;
      if (end > doc_start) sink.add(doc_start, end - doc_start);
      doc_start = end;
    });
    if (count > doc_start) sink.add(doc_start, count - doc_start);
  }
  sink.set_checksum(hasher.finish());
}

}  // namespace ulysses::pack

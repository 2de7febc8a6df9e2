// llm.c token shards (karpathy/llm.c dev/data/data_common.py): a header of 256 int32 —
// [0] magic, [1] version, [2] token count — then the tokens: magic 20240520 / version 1 → uint16
// (GPT-2), magic 20240801 / version 7 → uint32 (Llama 3). The file size must be exactly
// 1024 + count * token size, as llm.c's own loader requires.
//
// llm.c's tokenizers PREPEND the end-of-text token to every document, so documents start at each
// EOS by default (SplitAt::kBeforeEos, unless --split-at is given). Default EOS: 50256 (GPT-2
// <|endoftext|>) for version 1, 128000 (Llama 3 <|begin_of_text|>) for version 7. Shards are cut at a
// fixed token count, so a shard's first document is usually the tail of one begun in the previous
// shard; it is kept as a document of its own.
#include <array>

#include "core/error.hpp"
#include "pack/readers/binary_tokens.hpp"
#include "pack/readers/readers.hpp"

namespace ulysses::pack {
namespace {

constexpr std::uint64_t kHeaderBytes = 256 * 4;
constexpr const char* kHint = "llm.c shards are written by dev/data/data_common.py write_datafile()";

struct LlmcLayout {
  TokenType type;
  std::int64_t default_eos;
};

LlmcLayout layout_of(const InputFile& file, std::int32_t magic, std::int32_t version) {
  const auto expect_version = [&](std::int32_t wanted) {
    if (version != wanted) {
      throw BadInput(fmt::format("{}: byte offset 4: llm.c version {} for magic {}, expected {}",
                                 file.name(), version, magic, wanted), kHint);
    }
  };
  if (magic == kLlmcMagicGpt2) {
    expect_version(1);
    return {TokenType::kU16, 50256};
  }
  if (magic == kLlmcMagicLlama3) {
    expect_version(7);
    return {TokenType::kU32, 128000};
  }
  throw BadInput(fmt::format("{}: byte offset 0: magic {}, expected an llm.c magic ({} or {})",
                             file.name(), magic, kLlmcMagicGpt2, kLlmcMagicLlama3),
                 "pass --format jsonl|megatron|llmc|flat to say what the file is");
}

}  // namespace

std::unique_ptr<TokenSource> scan_llmc(const std::filesystem::path& path, const ReaderOptions& options,
                                       DocSink& sink) {
  InputFile file(path);
  sink.stats().input_bytes += file.size();
  if (file.size() < kHeaderBytes) {
    throw BadInput(fmt::format("{}: {} bytes, shorter than the {}-byte llm.c header", file.name(),
                               file.size(), kHeaderBytes), kHint);
  }
  std::array<std::int32_t, 256> header{};
  file.read_exact(0, header.data(), kHeaderBytes);
  const LlmcLayout layout = layout_of(file, header[0], header[1]);
  if (header[2] < 0) {
    throw BadInput(fmt::format("{}: byte offset 8: negative token count {}", file.name(), header[2]), kHint);
  }
  const auto count = static_cast<std::uint64_t>(header[2]);
  const std::uint64_t expected = kHeaderBytes + count * token_bytes(layout.type);
  if (file.size() != expected) {
    throw BadInput(fmt::format("{}: {} bytes, but its header says {} {} tokens = {} bytes ({})",
                               file.name(), file.size(), count, token_type_name(layout.type), expected,
                               file.size() < expected ? "truncated" : "extra bytes at the end"),
                   "the shard was cut short (copy again) or is not an llm.c shard");
  }
  const std::int64_t eos = options.eos_id >= 0 ? options.eos_id : layout.default_eos;
  const SplitAt split_at = options.split_at_given ? options.split_at : SplitAt::kBeforeEos;
  scan_split_stream(file, layout.type, kHeaderBytes, count, eos, split_at, options, sink);
  return std::make_unique<BinaryTokenSource>(std::move(file), layout.type, kHeaderBytes);
}

}  // namespace ulysses::pack

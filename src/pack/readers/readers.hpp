// Internal interface between scan_input (corpus.cpp) and the per-format readers.
//
// Each scan_<format>() validates one input completely, records its documents in a DocSink and
// returns the source that reads them back. Binary readers also set the sink's checksum (hashed while
// scanning); the JSONL, text and parquet readers leave it empty. They throw BadInput naming the file and the line (JSONL)
// or byte offset (binary) of the first problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pack/corpus.hpp"

namespace ulysses::pack {

constexpr std::int32_t kLlmcMagicGpt2 = 20240520;     // version 1, uint16 tokens
constexpr std::int32_t kLlmcMagicLlama3 = 20240801;   // version 7, uint32 tokens

// The documents of one input: appends DocRefs for `source` and counts them in `stats`.
class DocSink {
 public:
  DocSink(std::string input, std::uint32_t source, std::vector<DocRef>& docs, ScanStats& stats)
      : input_(std::move(input)), source_(source), docs_(docs), stats_(stats) {}

  // A document of `length` tokens from token `offset` of the source's stream; length 0 counts an
  // empty document. BadInput if longer than a DocRef holds (2^32 - 1 tokens).
  void add(std::uint64_t offset, std::uint64_t length);

  std::uint32_t source() const { return source_; }
  ScanStats& stats() { return stats_; }

  // The input's checksum as the manifest records it, for readers that hash while they scan.
  void set_checksum(std::string xxh3) { checksum_ = std::move(xxh3); }
  const std::string& checksum() const { return checksum_; }

 private:
  std::string input_;
  std::uint32_t source_;
  std::vector<DocRef>& docs_;
  ScanStats& stats_;
  std::string checksum_;
};

// Megatron's two files for a path given as the .bin, the .idx or their common prefix.
struct MegatronPaths {
  std::filesystem::path idx, bin;
};
MegatronPaths megatron_paths(const std::filesystem::path& path);

std::unique_ptr<TokenSource> scan_jsonl(const std::filesystem::path& path, const ReaderOptions& options,
                                        DocSink& sink);
// Plain text files (.txt/.md, .gz/.zst), one document per file or per blank-line block (options.text_split),
// tokenized with options.tokenizer (BadInput without one), spilled as JSONL text is.
std::unique_ptr<TokenSource> scan_text(const std::filesystem::path& path, const ReaderOptions& options, DocSink& sink);
// Parquet files (parquet.hpp): a text column tokenized with options.tokenizer, or a token-id column; spilled.
std::unique_ptr<TokenSource> scan_parquet(const std::filesystem::path& path, const ReaderOptions& options,
                                          DocSink& sink);
std::unique_ptr<TokenSource> scan_megatron(const std::filesystem::path& path,
                                           const ReaderOptions& options, DocSink& sink);
std::unique_ptr<TokenSource> scan_llmc(const std::filesystem::path& path, const ReaderOptions& options,
                                       DocSink& sink);
std::unique_ptr<TokenSource> scan_flat(const std::filesystem::path& path, const ReaderOptions& options,
                                       DocSink& sink);

}  // namespace ulysses::pack

// ulysses-pack's three modes as functions the CLI and the tests call: pack, inspect, verify.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "arch/rope.hpp"
#include "pack/corpus.hpp"
#include "pack/plan.hpp"
#include "tokenize/tokenizer.hpp"

namespace ulysses::pack {

enum class Policy { kBfd, kConcat, kPad };

struct PackOptions {
  std::vector<std::string> inputs;        // files or glob patterns
  std::filesystem::path output;
  bool overwrite = false;
  ReaderOptions reader;
  std::int64_t seq_len = 0;               // S, the global sequence length
  std::int64_t sp = 1;                    // P: S % (P * alignment) == 0
  std::int64_t sp_ring = 1;               // R: the trainer's --sp-ring; with R > 1, S % (2 * P * alignment) == 0
  std::int64_t alignment = 64;
  std::int64_t pad_id = 0;
  Policy policy = Policy::kBfd;
  LongDocs long_docs = LongDocs::kSplit;   // documents longer than S (kSplit: bfd only)
  std::uint64_t seed = 1234;
  double valid_fraction = 0.0;
  std::int64_t shard_tokens = std::int64_t{1} << 26;   // target tokens per shard (256 MiB of int32)
  int threads = 0;                        // 0: hardware concurrency
  std::filesystem::path model_config;     // optional HF config.json: heads vs SP, vocab size
  arch::RopeOverride rope;                // --rope-scaling / --rope-theta over it, checked as ulysses-train checks them
  std::int64_t vocab_size = 0;            // optional explicit vocabulary size
  std::filesystem::path tokenizer;        // set: JSONL inputs hold text, tokenized with this model folder's tokenizer
  std::string command;                    // recorded in the manifest
};

// ulysses-pack tokenize: JSONL text → JSONL token ids ({"input_ids": [...]} per line, in order: what
// `pack --tokens-key input_ids` reads), with the model's
// tokenizer, for users who keep the ids. Written atomically; a bad line stops it (nothing written).
struct TokenizeOptions {
  std::vector<std::string> inputs;        // JSONL[.gz|.zst], plain text or parquet files or glob patterns, in order
  std::filesystem::path output;           // one JSONL file
  std::filesystem::path tokenizer;
  ReaderOptions reader;                   // text_key, text_split, append_eos (the tokenizer and threads are set here)
  bool overwrite = false;
  int threads = 0;                        // 0: hardware concurrency
};

struct PackSummary {
  std::uint64_t documents = 0, tokens = 0, sequences = 0, train_sequences = 0, valid_sequences = 0;
  std::uint64_t shards = 0, skipped_documents = 0, empty_documents = 0;
  std::optional<std::uint64_t> target_tokens;   // loss-mask values of 1 (a mask packed), else nullopt
  PlanStats plan;
  double seconds = 0;
};

// Checks S against P × alignment; BadInput with the nearest valid lengths otherwise.
void check_seq_len(std::int64_t seq_len, std::int64_t sp, std::int64_t sp_ring, std::int64_t alignment);

PackSummary run_pack(const PackOptions& options);
int run_inspect(const std::filesystem::path& dataset, std::int64_t sample, std::int64_t max_tokens, bool as_bytes,
                bool show_mask = false);
int run_verify(const std::filesystem::path& dataset, int threads);   // 0 = all good, 1 = mismatch found
int run_tokenize(const TokenizeOptions& options);

// --tokenizer for packing or tokenize: the model folder's tokenizer, refused (BadInput) when its ids reach past
// vocab_size (> 0) or when append_eos and it names no end-of-document token. Logs its one-line description.
tokenize::Tokenizer load_tokenizer(const std::filesystem::path& path, std::int64_t vocab_size, bool append_eos,
                                   bool add_special_tokens);

}  // namespace ulysses::pack

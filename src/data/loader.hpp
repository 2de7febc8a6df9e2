// The trainer's data loader, torch-free: which sequences a rank reads at each step, and its slice of them.
//
// Order: the train split's sequences (manifest order, shard by shard) are visited epoch by epoch in a
// seeded permutation (a new one per epoch). A step consumes one global batch of dp × micro_batch ×
// grad_accum consecutive entries; micro-batch m of DP rank d takes entries [(m·dp + d)·micro_batch, +micro_batch).
// So SP=2 × DP=2 sees exactly the tokens of SP=1 × DP=1 with grad_accum 2. The cursor (sequences consumed)
// is all the state there is: it goes into checkpoints, and restoring it resumes the same order.
//
// Reading: an SP rank reads its slice of each sequence (SequenceParallel::slice: one range, two with a ring) and one
// more token after each range for its last label — never the rest — and derives labels, positions and document ids
// exactly as for the whole sequence (io/labels.hpp). Document ids are given for the whole sequence (from metadata
// only), since attention after the all-to-all sees all S positions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/sequence_parallel.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"

namespace ulysses::data {

struct LoaderOptions {
  SequenceParallel sp;                    // P and this rank's slice of each sequence
  std::int64_t dp = 1, dp_rank = 0;       // data-parallel replicas and this rank's replica
  std::int64_t micro_batch = 1;           // sequences per micro-batch per DP rank
  std::int64_t grad_accum = 1;            // micro-batches per step
  std::uint64_t seed = 0;
  std::int64_t vocab_size = 0;            // the model's; the dataset's ids must fit (0: unchecked)
  std::string split = "train";
};

// One micro-batch for this rank: B sequences, L = S/P local tokens each (the slice's ranges one after the other).
struct MicroBatch {
  std::int64_t batch = 0, local_len = 0, seq_len = 0;
  std::vector<std::int64_t> input_ids;     // [B, L]
  std::vector<std::int64_t> positions;     // [B, L] position ids, reset at each document
  std::vector<std::int64_t> labels;        // [B, L] next token or -100
  std::vector<std::int64_t> doc_ids;       // [B, S] document id of every position of the whole sequence
  std::vector<std::uint8_t> real;          // [B, L] 1 where the token is not padding
  std::int64_t valid_labels() const;       // labels != -100 in this rank's slice
  // Σ d² over the documents (runs of equal doc id, padding one more) of the B whole sequences: twice the causal
  // attention pairs, for the FLOP count (plan::step_flops). With a sliding window w a document longer than w
  // counts 2·d·w − w² (its query-key pairs within the window, doubled) instead of d².
  double attention_pairs(std::optional<std::int64_t> sliding_window = std::nullopt) const;
};

class DataLoader {
 public:
  // Opens the dataset and checks it against the options: S splits over P, vocabulary, a non-empty split.
  DataLoader(const std::filesystem::path& dataset, const LoaderOptions& options);
  ~DataLoader();

  const shard::Manifest& manifest() const { return manifest_; }
  int sp_degree() const { return o_.sp.degree(); }   // ranks that share each sequence
  std::int64_t seq_len() const { return manifest_.seq_len; }
  std::int64_t num_sequences() const { return static_cast<std::int64_t>(index_.size()); }
  std::int64_t sequences_per_step() const { return o_.dp * o_.micro_batch * o_.grad_accum; }

  // Micro-batch `micro` (0 ≤ micro < grad_accum) of the step that starts at the current cursor. BadInput naming the
  // shard and the sequence when a shard was truncated since it was opened, or holds an id outside the vocabulary.
  MicroBatch micro_batch(std::int64_t micro);
  void advance_step() { cursor_ += static_cast<std::uint64_t>(sequences_per_step()); }

  std::uint64_t cursor() const { return cursor_; }
  void set_cursor(std::uint64_t consumed) { cursor_ = consumed; }
  std::uint64_t epoch() const { return cursor_ / index_.size(); }

 private:
  struct Location {
    std::uint32_t shard;
    std::uint32_t row;
  };
  std::uint64_t sequence_at(std::uint64_t entry);   // entry of the endless epoch stream → index_ position
  void read_into(std::uint64_t seq, MicroBatch& mb, std::int64_t b);
  // BadInput naming the shard, the sequence, the token and the id when one of `ids` (tokens from `begin` of `row`) is
  // negative or past the model's vocabulary: the manifest vouched for them at open, the file may have changed since.
  void check_ids(const shard::ShardReader& reader, std::int64_t row, std::int64_t begin,
                 std::span<const std::int32_t> ids) const;

  LoaderOptions o_;
  SequenceSlice slice_;   // this rank's tokens of every sequence
  std::filesystem::path dir_;
  shard::Manifest manifest_;
  std::vector<shard::ShardReader> shards_;
  std::vector<Location> index_;
  std::uint64_t cursor_ = 0;
  std::uint64_t perm_epoch_ = ~std::uint64_t{0};
  std::vector<std::uint64_t> perm_;
};

}  // namespace ulysses::data

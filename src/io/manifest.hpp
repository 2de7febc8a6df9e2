// manifest.json of a packed dataset: what the trainer checks before it reads a shard, and what
// `ulysses-pack inspect/verify` reports. Spec: docs/data-format.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/shard.hpp"

namespace ulysses::shard {

struct ManifestShard {
  std::string file;            // relative to the dataset directory, e.g. "shard-00000.h5"
  std::string split;           // "train" or "valid"
  std::int64_t num_sequences = 0;
  std::int64_t bytes = 0;
  std::string xxh3;            // XXH3-64 of the file, 16 hex digits
};

struct ManifestInput {
  std::string path;
  std::string format;
  std::int64_t bytes = 0;
  std::string xxh3;
  std::int64_t documents = 0;
  std::int64_t tokens = 0;
};

// The tokenizer that turned text inputs into ids (ulysses-pack --tokenizer); empty file: the inputs held ids.
struct ManifestTokenizer {
  std::string file;            // the tokenizer.json read
  std::string xxh3;            // XXH3-64 of it
  std::int64_t eos_id = -1;    // appended to every document (-1: none)
  bool add_special_tokens = true;   // the tokenizer's template (BOS) was put around each document
};

struct Manifest {
  int format_version = 1;
  std::int64_t seq_len = 0, sp = 1, alignment = 64, pad_id = 0;
  std::int64_t sp_ring = 1;          // --sp-ring it was packed for ("sp_ring" in the file only when > 1)
  std::int64_t vocab_size = 0;       // 0: unknown (no --model-config / --vocab-size given)
  std::int64_t max_token_id = -1;
  bool has_loss_mask = false;
  std::string policy;                // bfd | concat | pad
  std::uint64_t seed = 0;
  std::string command;               // the command line that made it
  std::string created_by;            // tool and version
  std::vector<ManifestInput> inputs;
  ManifestTokenizer tokenizer;       // "tokenizer" in the file, present only for text inputs
  std::vector<ManifestShard> shards;
  nlohmann::json stats;              // counts: documents, tokens, sequences, split/truncated/dropped, padding fraction

  std::int64_t num_sequences(const std::string& split) const;
};

nlohmann::json to_json(const Manifest& m);
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);   // BadInput naming `where`
void write_manifest(const Manifest& m, const std::filesystem::path& path);        // pretty JSON
// "" when a shard's own sizes (its root attributes) are the manifest's, else one phrase naming both: a reader must
// not index a shard by the manifest's seq_len when the shard says another.
std::string shard_mismatch(const ShardParams& shard, const Manifest& m);

Manifest read_manifest(const std::filesystem::path& dataset_dir);                 // BadInput on missing/bad

// What a dataset is, whatever its path: its sequence length, the sequences of each split, and one XXH3 of its shards'
// checksums, splits and counts in manifest order (the order the loader reads them in). Two datasets with the same
// identity hold the same sequences in the same order: a byte-identical copy elsewhere has the original's, other data
// behind the same path has not. {"seq_len", "train_sequences", "valid_sequences", "shards", "xxh3"}.
nlohmann::json data_identity(const Manifest& m);

}  // namespace ulysses::shard

// The checkpoint directory format, torch-free (ulysses-train writes it; ulysses-ckpt reads it).
// Spec: docs/checkpoints.md.
//
//   RUN/checkpoints/
//     latest                      text: the name of the newest complete checkpoint ("step-0000020")
//     step-0000020/
//       manifest.json             format, version, step, the layout it was written with, files + checksums
//       model.safetensors         fp32 weights, Hugging Face names (written once: identical on all ranks)
//       optimizer.safetensors     AdamW state: exp_avg.<param>, exp_avg_sq.<param>; metadata "steps"
//       (sharded states: per-rank model-/optimizer-RRRRR-of-WWWWW.safetensors instead, see optimizer_layout)
//       trainer_state.json        step, data cursor, tokens seen, seed, the resolved options
//       config.json               the Hugging Face model config
//
// A checkpoint is written as ".step-NNNNNNN.tmp-PID" and renamed when complete; `latest` is replaced
// (write + rename) only after that, so a crash at any moment leaves the previous checkpoint usable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::checkpoint {

inline constexpr const char* kFormatName = "ulysses-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifest = "manifest.json";
inline constexpr const char* kModel = "model.safetensors";
inline constexpr const char* kOptimizer = "optimizer.safetensors";
inline constexpr const char* kTrainerState = "trainer_state.json";
inline constexpr const char* kConfig = "config.json";
inline constexpr const char* kLatest = "latest";
// The hint of every error about a damaged checkpoint (any of its files), in every tool.
inline constexpr const char* kDamagedHint = "the checkpoint is damaged; use another step-* directory of the run";

struct FileEntry {
  std::string file;
  std::int64_t bytes = 0;
  std::string xxh3;
};

// The entry of `file` (a name inside `dir`): its size and XXH3, read from the disk.
FileEntry file_entry(const std::filesystem::path& dir, const std::string& file);

// How the weights and optimizer state are stored; readers dispatch on this field and refuse a value they do
// not know. "replicated": model.safetensors and optimizer.safetensors hold every tensor whole (written once:
// replicated states, and what `ulysses-ckpt merge` writes). "sharded" (io/sharded_checkpoint.hpp): each shard
// rank's model-RRRRR-of-WWWWW / optimizer-RRRRR-of-WWWWW files, written in parallel without gathering, and
// the layout in the manifest's "shards".
inline constexpr const char* kOptimizerReplicated = "replicated";

struct Manifest {
  int format_version = kFormatVersion;
  std::int64_t step = 0;
  std::int64_t world = 1, sp = 1, dp = 1;   // the layout it was written with (the files do not depend on it)
  std::string architecture;                 // e.g. "LlamaForCausalLM"
  std::string optimizer_layout = kOptimizerReplicated;   // absent in older manifests: replicated
  bool consolidated = false;                // written by `ulysses-ckpt merge` (absent: false)
  nlohmann::json shards;                    // "sharded" only: the ShardLayout (io/sharded_checkpoint.hpp)
  std::vector<FileEntry> files;
};

nlohmann::json to_json(const Manifest& m);
Manifest read_manifest(const std::filesystem::path& checkpoint_dir);   // BadInput naming the file/field
Manifest parse_manifest(const std::string& text, const std::filesystem::path& file);   // the same, from text
void write_manifest(const Manifest& m, const std::filesystem::path& checkpoint_dir);

std::string step_dir_name(std::int64_t step);   // "step-0000020"

// The checkpoint `latest` names, if it exists and holds a manifest; nullopt when there is none yet.
std::optional<std::filesystem::path> latest(const std::filesystem::path& checkpoints_dir);
void set_latest(const std::filesystem::path& checkpoints_dir, const std::string& name);
// A step-NNNNNNN directory, a `latest` file, a run's checkpoints/ (its `latest`) or a run directory → the
// checkpoint directory; nullopt when `path` is none of these (e.g. a Hugging Face directory). BadInput when a
// `latest` names nothing complete.
std::optional<std::filesystem::path> find_checkpoint(const std::filesystem::path& path);
// The step-* directories under checkpoints_dir that hold a manifest, newest first (whether or not `latest` names
// them: a run whose `latest` was lost still holds them).
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& checkpoints_dir);
// What killed saves leave under checkpoints_dir: ".step-*.tmp-*" directories (and their .lock files) and
// "latest.tmp-*" files. Only for a caller that holds the run's lock (no save of another run is under way).
std::vector<std::filesystem::path> save_temporaries(const std::filesystem::path& checkpoints_dir);
// BadInput naming the file when dir/f is missing or its size or XXH3 differs from the manifest's entry.
void verify_file(const std::filesystem::path& dir, const FileEntry& f);
// Removes the oldest step-* directories so that at most keep_last remain (keep_last <= 0: keep all).
void prune(const std::filesystem::path& checkpoints_dir, int keep_last);

}  // namespace ulysses::checkpoint

// The inputs of ulysses-ckpt, opened and checked before any output is written:
//
//   Weights     a named set of tensors readable in pieces: one safetensors file (a checkpoint's
//               model.safetensors / optimizer.safetensors), a Hugging Face directory (single or sharded),
//               or the per-rank files of a sharded checkpoint (io/sharded_checkpoint.hpp), seen whole.
//   Checkpoint  a step-NNNNNNN directory of the trainer (io/checkpoint_format.hpp), found from the
//               directory itself, a run's checkpoints/ (following `latest`) or the run directory; every
//               file the manifest lists is checked (bytes, xxh3), the weights and optimizer state against
//               the config's parameter table (names, shapes, F32) — a LoRA run's against its adapters
//               (ckpt/lora.hpp) — the trainer state against the manifest.
//
// Every check failure is a BadInput naming the file and the numbers (exit 2). Tensors are read in chunks
// (kChunkBytes), so what these hold in memory is headers and one chunk — never a whole model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arch/model_config.hpp"
#include "arch/parameters.hpp"
#include "ckpt/hf_files.hpp"
#include "ckpt/lora.hpp"
#include "io/checkpoint_format.hpp"
#include "io/safetensors.hpp"
#include "io/sharded_checkpoint.hpp"

namespace ulysses::ckpt {

inline constexpr std::uint64_t kChunkBytes = std::uint64_t{16} << 20;   // 16 MiB pieces

class Weights {
 public:
  Weights() = default;
  static Weights file(const std::filesystem::path& safetensors_file);
  static Weights hf_dir(const std::filesystem::path& dir);
  static Weights sharded(const std::filesystem::path& checkpoint_dir, const checkpoint::ShardLayout& layout,
                         const std::string& stem);   // stem: checkpoint::kModelStem or kOptimizerStem

  const std::filesystem::path& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }   // file order (a directory: sorted)
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const st::TensorInfo& info(const std::string& name) const;
  const std::filesystem::path& file_of(const std::string& name) const;
  void read_range(const std::string& name, std::uint64_t offset, std::uint64_t n, void* dst) const;
  const std::map<std::string, std::string>& metadata() const;   // of a single file; empty for a directory

  // Elements [first, first + count) of a model-float tensor as fp32 (scratch: a reusable buffer).
  void read_f32(const std::string& name, std::uint64_t first, std::uint64_t count, float* dst,
                std::vector<char>& scratch) const;

 private:
  std::filesystem::path path_;
  std::shared_ptr<st::Reader> file_;
  std::shared_ptr<st::HfWeights> dir_;
  std::shared_ptr<checkpoint::ShardedTensors> shards_;
  std::vector<std::string> names_;
  std::map<std::string, const st::TensorInfo*> index_;
};

struct TrainerStateSummary {
  std::int64_t step = 0;
  std::uint64_t cursor = 0;
  std::int64_t tokens_seen = 0;
  nlohmann::json options;   // the run's resolved options (empty for import-hf's step 0)
};

struct Checkpoint {
  std::filesystem::path dir;
  checkpoint::Manifest manifest;
  arch::ModelConfigFile spec;   // its config.json
  Weights model, optimizer;
  std::vector<std::string> model_files;   // the files the weights are read from, with config and trainer state
  std::int64_t optimizer_steps = 0;
  TrainerStateSummary state;
  std::optional<LoraRun> lora;   // a LoRA run's checkpoint: `model` holds its adapters only, not the base
};

// Which files open_checkpoint hashes against the manifest (sizes are always checked).
enum class Verify {
  kAll,       // every listed file (merge, diff)
  kNone,      // sizes only (inspect hashes and reports itself; export-hf hashes what it reads, in parallel)
};

// Opens and checks a checkpoint (see above); hashing reads each hashed file once (page cache helps the rest).
Checkpoint open_checkpoint(const std::filesystem::path& path, Verify verify = Verify::kAll);

// Checks `w` holds exactly the parameters of `spec` (names, shapes; F32 only if `f32_only`), ignoring
// ignorable_extra() names when `allow_ignorable`. BadInput listing the first differences.
void check_parameters(const Weights& w, const arch::ModelConfigFile& spec, bool f32_only, bool allow_ignorable);

// The tensors of `model` by name: "a whole model" (a LoRA checkpoint's adapters are refused, one line naming
// export-peft and export-hf --merge-lora).
void require_whole_model(const Checkpoint& c, const std::string& command);

// Hashes the listed files of a checkpoint against its manifest (BadInput naming the first mismatch).
void verify_checksums(const std::filesystem::path& dir, const checkpoint::Manifest& m,
                      const std::vector<std::string>& files);

bool is_hf_dir(const std::filesystem::path& path);   // config.json + model.safetensors or its index

}  // namespace ulysses::ckpt

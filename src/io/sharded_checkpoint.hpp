// The sharded checkpoint layout (optimizer_layout "sharded"), torch-free: what ulysses-train writes when its
// model states are sharded (ZeRO-3 / FSDP), without gathering anything, and how readers see whole tensors in it.
//
//   step-NNNNNNN/
//     manifest.json                        optimizer_layout "sharded" and "shards": the layout below
//     model-00000-of-00004.safetensors     rank r's fp32 shard of every group: tensor "<group>" [shard_numel]
//     optimizer-00000-of-00004.safetensors "exp_avg.<group>", "exp_avg_sq.<group>" [shard_numel]; metadata steps
//     ... one pair per shard rank (with hybrid_shard: per rank of one SP group; the DP replicas hold copies)
//     trainer_state.json, config.json      as in every checkpoint
//
// A group is a flat fp32 vector: its parameters (Hugging Face names) one after another at their offsets,
// padded to world × shard_numel (shard_numel = ceil(numel / world)); rank r holds elements
// [r · shard_numel, (r + 1) · shard_numel). The layout is checked against itself and every file against it
// (names, dtype F32, shapes): each violation a BadInput naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"

namespace ulysses::checkpoint {

inline constexpr const char* kOptimizerSharded = "sharded";
inline constexpr const char* kModelStem = "model";
inline constexpr const char* kOptimizerStem = "optimizer";

struct ShardLayout {
  struct Parameter {
    std::string name;
    std::vector<std::int64_t> shape;
    std::int64_t offset = 0;   // in its group's flat vector
  };
  struct Group {
    std::string name;          // e.g. "model.layers.0.matrices"
    std::int64_t numel = 0, shard_numel = 0;
    std::vector<Parameter> parameters;
  };
  int world = 1;
  std::vector<Group> groups;
};

nlohmann::json to_json(const ShardLayout& l);
ShardLayout parse_shard_layout(const nlohmann::json& j, const std::filesystem::path& manifest);   // checked
std::string shard_file(const std::string& stem, int rank, int world);   // "model-00001-of-00004.safetensors"

// Whole tensors by name over the per-rank files of one stem: "model" (names: the parameters) or "optimizer"
// (names: exp_avg.<parameter>, exp_avg_sq.<parameter>). Reads touch only the files and bytes they need.
class ShardedTensors {
 public:
  ShardedTensors(const std::filesystem::path& dir, const ShardLayout& layout, const std::string& stem);

  const std::vector<std::string>& names() const { return names_; }   // parameters in layout order
  const st::TensorInfo* find(const std::string& name) const;         // F32, its shape; begin 0, end its bytes
  void read(const st::TensorInfo& t, void* dst) const { read_range(t, 0, t.nbytes(), dst); }
  void read_range(const st::TensorInfo& t, std::uint64_t offset, std::uint64_t n, void* dst) const;
  const std::map<std::string, std::string>& metadata() const { return files_.front().metadata(); }   // rank 0's
  std::filesystem::path pattern() const;   // "DIR/model-*-of-00004.safetensors", for messages

 private:
  struct Where {
    std::string tensor;          // the group's tensor in each rank file
    std::int64_t offset;         // of the parameter in the group
    std::int64_t shard_numel;
  };
  std::filesystem::path dir_;
  std::string stem_;
  int world_;
  std::vector<st::Reader> files_;   // per rank
  std::vector<std::string> names_;
  std::map<std::string, st::TensorInfo> infos_;
  std::map<std::string, Where> where_;
};

}  // namespace ulysses::checkpoint

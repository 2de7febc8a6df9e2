// Pass 2 of packing: materialise planned sequences into shard files, several shards in parallel.
// Each shard's bytes depend only on the plan and the order, never on the thread that wrote it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "io/manifest.hpp"
#include "io/shard.hpp"
#include "pack/plan.hpp"
#include "pack/scan.hpp"

namespace ulysses::pack {

struct ShardJob {
  std::string file;                          // name inside the dataset directory
  std::string split;                         // "train" | "valid"
  std::span<const std::uint64_t> sequences;  // plan sequence indices, in the order they are written
};

// Splits an ordered list of sequences into jobs of at most per_shard sequences named PREFIX-NNNNN.h5.
std::vector<ShardJob> make_jobs(std::span<const std::uint64_t> order, std::uint64_t per_shard,
                                const std::string& prefix, const std::string& split);

struct WrittenShards {
  std::vector<shard::ManifestShard> entries;   // in job order
  std::uint64_t target_tokens = 0;             // loss-mask values of 1 written (0 without a mask)
};
// Writes every job into dir.
WrittenShards write_shards(const std::vector<ShardJob>& jobs, const PackPlan& plan, const Corpus& corpus,
                           const shard::ShardParams& params, const std::filesystem::path& dir, int threads);

}  // namespace ulysses::pack

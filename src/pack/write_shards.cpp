#include "pack/write_shards.hpp"

#include <algorithm>
#include <atomic>
#include <memory>

#include <fmt/format.h>

#include "core/parallel.hpp"
#include "core/progress.hpp"
#include "pack/phase_timer.hpp"

namespace ulysses::pack {
namespace {

// Tokens per append: 1 MiB of int32, small enough to stay in cache from the piece reads that fill the
// buffer through the pwrite that empties it and the checksum that reads it once more (32 MiB blocks
// measured 13% more CPU time). Small appends cost little: the token rows are written with pwrite, not
// through HDF5.
constexpr std::int64_t kBlockTokens = std::int64_t{1} << 18;

// The metadata of one planned sequence: its length and where each of its pieces starts. Known from the
// plan alone, so a shard's metadata is written before its tokens (see PlannedShardWriter).
shard::SequenceMeta sequence_meta(const PackPlan& plan, std::uint64_t seq) {
  shard::SequenceMeta meta;
  meta.doc_starts.reserve(static_cast<std::size_t>(plan.seq_begin[seq + 1] - plan.seq_begin[seq]));
  std::int32_t pos = 0;
  for (std::uint64_t p = plan.seq_begin[seq]; p < plan.seq_begin[seq + 1]; ++p) {
    meta.doc_starts.push_back(pos);
    pos += static_cast<std::int32_t>(plan.pieces[p].length);
  }
  meta.length = pos;
  return meta;
}

// Fills the tokens of one sequence, ids/mask [seq_len]: its pieces, then padding.
void assemble(const PackPlan& plan, std::uint64_t seq, const Corpus& corpus, const shard::ShardParams& params,
              std::int32_t* ids, std::uint8_t* mask) {
  std::int64_t pos = 0;
  for (std::uint64_t p = plan.seq_begin[seq]; p < plan.seq_begin[seq + 1]; ++p) {
    const Piece& piece = plan.pieces[p];
    const DocRef& doc = corpus.docs[piece.doc];
    corpus.sources[doc.source]->read(doc.offset + piece.offset, piece.length, ids + pos,
                                     mask ? mask + pos : nullptr);
    pos += piece.length;
  }
  std::fill(ids + pos, ids + params.seq_len, static_cast<std::int32_t>(params.pad_id));
  if (mask) std::fill(mask + pos, mask + params.seq_len, std::uint8_t{0});
}

shard::ManifestShard write_one(const ShardJob& job, const PackPlan& plan, const Corpus& corpus,
                               const shard::ShardParams& params, const std::filesystem::path& dir,
                               Progress& progress, StepClock& clock, std::atomic<std::uint64_t>& targets) {
  clock.start();
  const std::int64_t S = params.seq_len;
  const auto n = static_cast<std::int64_t>(job.sequences.size());
  const std::int64_t block = std::clamp<std::int64_t>(kBlockTokens / S, 1, n);
  // [block, S] each; every row is fully written by assemble(), so the buffers are not zeroed
  const auto cells = static_cast<std::size_t>(block * S);
  const auto ids_buffer = std::make_unique_for_overwrite<std::int32_t[]>(cells);
  const auto mask_buffer = std::make_unique_for_overwrite<std::uint8_t[]>(params.has_loss_mask ? cells : 0);
  const std::span<std::int32_t> ids(ids_buffer.get(), cells);
  const std::span<std::uint8_t> mask(mask_buffer.get(), params.has_loss_mask ? cells : 0);
  std::vector<shard::SequenceMeta> metas;
  metas.reserve(job.sequences.size());
  for (const std::uint64_t seq : job.sequences) metas.push_back(sequence_meta(plan, seq));
  shard::PlannedShardWriter writer(dir / job.file, params, metas);
  clock.lap(Step::kCreate);
  for (std::int64_t first = 0; first < n; first += block) {
    const std::int64_t count = std::min(block, n - first);
    std::uint64_t tokens = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const auto row = static_cast<std::size_t>(i * S);
      const auto k = static_cast<std::size_t>(first + i);
      assemble(plan, job.sequences[k], corpus, params, ids.data() + row, mask.empty() ? nullptr : mask.data() + row);
      tokens += static_cast<std::uint64_t>(metas[k].length);
    }
    clock.lap(Step::kGather);
    const auto used = static_cast<std::size_t>(count * S);
    if (!mask.empty()) targets += static_cast<std::uint64_t>(std::count(mask.begin(), mask.begin() + used, 1));
    writer.append(ids.first(used), mask.first(mask.empty() ? 0 : used));
    clock.lap(Step::kWrite);
    progress.add(static_cast<std::uint64_t>(count), tokens);
  }
  shard::ManifestShard entry;
  entry.xxh3 = writer.close();   // the rows were hashed as they were written: the file is not read back
  clock.lap(Step::kClose);
  entry.file = job.file;
  entry.split = job.split;
  entry.num_sequences = n;
  entry.bytes = static_cast<std::int64_t>(std::filesystem::file_size(dir / job.file));
  return entry;
}

}  // namespace

std::vector<ShardJob> make_jobs(std::span<const std::uint64_t> order, std::uint64_t per_shard,
                                const std::string& prefix, const std::string& split) {
  std::vector<ShardJob> jobs;
  for (std::uint64_t first = 0; first < order.size(); first += per_shard) {
    const std::uint64_t count = std::min<std::uint64_t>(per_shard, order.size() - first);
    jobs.push_back({fmt::format("{}-{:05d}.h5", prefix, jobs.size()), split, order.subspan(first, count)});
  }
  return jobs;
}

WrittenShards write_shards(const std::vector<ShardJob>& jobs, const PackPlan& plan, const Corpus& corpus,
                           const shard::ShardParams& params, const std::filesystem::path& dir, int threads) {
  WrittenShards out;
  out.entries.resize(jobs.size());
  Progress progress("write", plan.num_sequences(), "sequences", "tokens");
  StepClock clock;
  std::atomic<std::uint64_t> targets{0};
  parallel_for(jobs.size(), threads, [&](std::size_t j) {
    out.entries[j] = write_one(jobs[j], plan, corpus, params, dir, progress, clock, targets);
  });
  progress.finish();
  clock.log();
  out.target_tokens = targets;
  return out;
}

}  // namespace ulysses::pack

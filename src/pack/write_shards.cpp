#include "pack/write_shards.hpp"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/checksum.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"

namespace ulysses::pack {
namespace {

// Tokens per append: 1 MiB of int32, small enough to stay in cache between the piece reads that fill
// the buffer and the pwrite that empties it (32 MiB blocks measured 13% more CPU time). Small appends
// cost little: ShardWriter writes the token rows with pwrite, not through HDF5.
constexpr std::int64_t kBlockTokens = std::int64_t{1} << 18;

// Fills one sequence: ids/mask [seq_len] and its metadata.
void assemble(const PackPlan& plan, std::uint64_t seq, const Corpus& corpus, const shard::ShardParams& params,
              std::int32_t* ids, std::uint8_t* mask, shard::SequenceMeta& meta) {
  std::int32_t pos = 0;
  meta.doc_starts.clear();
  for (std::uint64_t p = plan.seq_begin[seq]; p < plan.seq_begin[seq + 1]; ++p) {
    const Piece& piece = plan.pieces[p];
    const DocRef& doc = corpus.docs[piece.doc];
    meta.doc_starts.push_back(pos);
    corpus.sources[doc.source]->read(doc.offset + piece.offset, piece.length, ids + pos,
                                     mask ? mask + pos : nullptr);
    pos += static_cast<std::int32_t>(piece.length);
  }
  meta.length = pos;
  std::fill(ids + pos, ids + params.seq_len, static_cast<std::int32_t>(params.pad_id));
  if (mask) std::fill(mask + pos, mask + params.seq_len, std::uint8_t{0});
}

shard::ManifestShard write_one(const ShardJob& job, const PackPlan& plan, const Corpus& corpus,
                               const shard::ShardParams& params, const std::filesystem::path& dir,
                               Progress& progress) {
  const std::int64_t S = params.seq_len;
  const auto n = static_cast<std::int64_t>(job.sequences.size());
  const std::int64_t block = std::clamp<std::int64_t>(kBlockTokens / S, 1, n);
  // [block, S] each; every row is fully written by assemble(), so the buffers are not zeroed
  const auto cells = static_cast<std::size_t>(block * S);
  const auto ids_buffer = std::make_unique_for_overwrite<std::int32_t[]>(cells);
  const auto mask_buffer = std::make_unique_for_overwrite<std::uint8_t[]>(params.has_loss_mask ? cells : 0);
  const std::span<std::int32_t> ids(ids_buffer.get(), cells);
  const std::span<std::uint8_t> mask(mask_buffer.get(), params.has_loss_mask ? cells : 0);
  std::vector<shard::SequenceMeta> metas(static_cast<std::size_t>(block));
  shard::ShardWriter writer(dir / job.file, params, n);
  for (std::int64_t first = 0; first < n; first += block) {
    const std::int64_t count = std::min(block, n - first);
    std::uint64_t tokens = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const auto row = static_cast<std::size_t>(i * S);
      assemble(plan, job.sequences[static_cast<std::size_t>(first + i)], corpus, params, ids.data() + row,
               mask.empty() ? nullptr : mask.data() + row, metas[static_cast<std::size_t>(i)]);
      tokens += static_cast<std::uint64_t>(metas[static_cast<std::size_t>(i)].length);
    }
    const auto used = static_cast<std::size_t>(count * S);
    writer.append(ids.first(used), mask.first(mask.empty() ? 0 : used),
                  std::span(metas).first(static_cast<std::size_t>(count)));
    progress.add(static_cast<std::uint64_t>(count), tokens);
  }
  writer.close();
  shard::ManifestShard entry;
  entry.file = job.file;
  entry.split = job.split;
  entry.num_sequences = n;
  entry.bytes = static_cast<std::int64_t>(std::filesystem::file_size(dir / job.file));
  entry.xxh3 = xxh3_file_hex(dir / job.file);
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

std::vector<shard::ManifestShard> write_shards(const std::vector<ShardJob>& jobs, const PackPlan& plan,
                                               const Corpus& corpus, const shard::ShardParams& params,
                                               const std::filesystem::path& dir, int threads) {
  std::vector<shard::ManifestShard> entries(jobs.size());
  Progress progress("write", plan.num_sequences(), "sequences", "tokens");
  parallel_for(jobs.size(), threads, [&](std::size_t j) {
    entries[j] = write_one(jobs[j], plan, corpus, params, dir, progress);
  });
  progress.finish();
  return entries;
}

}  // namespace ulysses::pack

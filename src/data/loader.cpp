#include "data/loader.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/shuffle.hpp"
#include "io/labels.hpp"
#include "io/shard_format.hpp"

namespace ulysses::data {
namespace {

// The dataset and the SP degree, for messages: "DIR (packed for --sp 4) with --sp 3".
std::string source_of(const std::filesystem::path& dir, const shard::Manifest& m, const LoaderOptions& o) {
  return fmt::format("{} (packed for --sp {}) with --sp {}", dir.string(), m.sp, o.sp.degree());
}

// The vocabulary rule (as ulysses-pack's): every token id < the model's vocab_size. The manifest's vocabulary is the
// tokenizer's, which may be smaller than the model's (Qwen2: 151643 tokens, vocab_size 151936); without a recorded
// largest id, a tokenizer larger than the model is refused.
void check_compatible(const shard::Manifest& m, const LoaderOptions& o, const std::filesystem::path& dir) {
  if (o.vocab_size > 0 && m.max_token_id < 0 && m.vocab_size > o.vocab_size)
    throw BadInput(fmt::format("{}: packed for a vocabulary of {} tokens, more than the model's {}", dir.string(),
                               m.vocab_size, o.vocab_size),
                   "re-pack with the model's config (ulysses-pack --model-config) or use the matching model");
  if (o.vocab_size > 0 && m.max_token_id >= o.vocab_size)
    throw BadInput(fmt::format("{}: token id {} is outside the model's vocabulary of {}", dir.string(),
                               m.max_token_id, o.vocab_size),
                   "the data was tokenized for another model");
}

}  // namespace

std::int64_t MicroBatch::valid_labels() const {
  return std::count_if(labels.begin(), labels.end(), [](std::int64_t l) { return l != shard::kIgnoreIndex; });
}

double MicroBatch::attention_pairs(std::optional<std::int64_t> sliding_window) const {
  auto doubled_pairs = [&](double d) {
    if (!sliding_window || d <= static_cast<double>(*sliding_window)) return d * d;
    const auto w = static_cast<double>(*sliding_window);
    return 2 * d * w - w * w;
  };
  double pairs = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto row = doc_ids.begin() + b * seq_len;
    std::int64_t begin = 0;
    for (std::int64_t i = 1; i <= seq_len; ++i)
      if (i == seq_len || row[i] != row[i - 1]) {
        pairs += doubled_pairs(static_cast<double>(i - begin));
        begin = i;
      }
  }
  return pairs;
}

DataLoader::DataLoader(const std::filesystem::path& dataset, const LoaderOptions& options)
    : o_(options), dir_(dataset), manifest_(shard::read_manifest(dataset)) {
  ULY_CHECK(o_.dp_rank >= 0 && o_.dp_rank < o_.dp, "dp rank {} of {}", o_.dp_rank, o_.dp);
  slice_ = o_.sp.slice(manifest_.seq_len, source_of(dir_, manifest_, o_));   // checks that S splits over P
  check_compatible(manifest_, o_, dir_);
  for (const auto& s : manifest_.shards) {
    if (s.split != o_.split) continue;
    const auto shard = static_cast<std::uint32_t>(shards_.size());
    shards_.emplace_back(dir_ / s.file);
    if (const std::string differ = shard::shard_mismatch(shards_.back().params(), manifest_); !differ.empty())
      throw BadInput(fmt::format("{}: {}", (dir_ / s.file).string(), differ), "the dataset is damaged: re-pack it");
    if (s.bytes > 0 && shards_.back().bytes() != static_cast<std::uintmax_t>(s.bytes))
      throw BadInput(fmt::format("{}: {} bytes, the manifest says {}", (dir_ / s.file).string(),
                                 shards_.back().bytes(), s.bytes),
                     "the shard changed after it was packed: ulysses-pack verify checks the dataset; re-pack it");
    for (std::int64_t row = 0; row < shards_.back().num_sequences(); ++row)
      index_.push_back({shard, static_cast<std::uint32_t>(row)});
  }
  if (index_.empty())
    throw BadInput(fmt::format("{}: the {} split holds no sequences", dir_.string(), o_.split),
                   o_.split == "valid" ? "pack with --valid-fraction" : "check the dataset directory");
}

DataLoader::~DataLoader() = default;

void DataLoader::check_ids(const shard::ShardReader& reader, std::int64_t row, std::int64_t begin,
                           std::span<const std::int32_t> ids) const {
  const auto bad = std::find_if(ids.begin(), ids.end(), [&](std::int32_t id) {
    return id < 0 || (o_.vocab_size > 0 && id >= o_.vocab_size);
  });
  if (bad == ids.end()) return;
  throw BadInput(fmt::format("{}: sequence {}, token {}: id {} is outside the model's vocabulary of {}", reader.path(),
                             row, begin + (bad - ids.begin()), *bad, o_.vocab_size),
                 fmt::format("its manifest's largest id is {}: the shard changed after it was packed (ulysses-pack "
                             "verify checks it); re-pack the dataset", manifest_.max_token_id));
}

std::uint64_t DataLoader::sequence_at(std::uint64_t entry) {
  const std::uint64_t n = index_.size(), epoch = entry / n;
  if (epoch != perm_epoch_) {
    perm_ = shuffled_order(n, o_.seed + 0x9E3779B97F4A7C15ull * (epoch + 1));
    perm_epoch_ = epoch;
  }
  return perm_[entry % n];
}

MicroBatch DataLoader::micro_batch(std::int64_t micro) {
  ULY_CHECK(micro >= 0 && micro < o_.grad_accum, "micro-batch {} of {}", micro, o_.grad_accum);
  MicroBatch mb;
  mb.batch = o_.micro_batch;
  mb.seq_len = manifest_.seq_len;
  mb.local_len = slice_.size();
  const auto BL = static_cast<std::size_t>(mb.batch * mb.local_len);
  mb.input_ids.resize(BL);
  mb.positions.resize(BL);
  mb.labels.resize(BL);
  mb.real.resize(BL);
  mb.doc_ids.resize(static_cast<std::size_t>(mb.batch * mb.seq_len));
  const std::uint64_t first = cursor_ + static_cast<std::uint64_t>((micro * o_.dp + o_.dp_rank) * o_.micro_batch);
  for (std::int64_t b = 0; b < mb.batch; ++b) read_into(sequence_at(first + static_cast<std::uint64_t>(b)), mb, b);
  return mb;
}

void DataLoader::read_into(std::uint64_t seq, MicroBatch& mb, std::int64_t b) {
  const Location loc = index_[seq];
  const shard::ShardReader& reader = shards_[loc.shard];
  const shard::SequenceMeta& meta = reader.meta(loc.row);
  const std::int64_t S = mb.seq_len;
  auto off = static_cast<std::size_t>(b * mb.local_len);   // where the range's tokens go in [B, L]
  for (const TokenRange& range : slice_.ranges) {
    const std::int64_t L = range.size(), begin = range.begin;
    const std::int64_t n_read = std::min(L + 1, S - begin);         // the range, and the next token if any
    std::vector<std::int32_t> ids(static_cast<std::size_t>(L + 1), 0);  // [L + 1]
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(L + 1), 0);
    reader.read(loc.row, begin, n_read, ids.data(), mask.data());
    check_ids(reader, loc.row, begin, std::span(ids).first(static_cast<std::size_t>(n_read)));
    const auto n = static_cast<std::size_t>(L);
    std::copy(ids.begin(), ids.begin() + L, mb.input_ids.begin() + static_cast<std::ptrdiff_t>(off));
    shard::slice_labels(meta, begin, ids, mask, std::span(mb.labels).subspan(off, n));
    shard::slice_positions(meta, begin, std::span(mb.positions).subspan(off, n));
    for (std::int64_t i = 0; i < L; ++i) mb.real[off + static_cast<std::size_t>(i)] = begin + i < meta.length ? 1 : 0;
    off += n;
  }
  shard::slice_doc_ids(meta, 0, std::span(mb.doc_ids).subspan(static_cast<std::size_t>(b * S), static_cast<std::size_t>(S)));
}

}  // namespace ulysses::data

// `ulysses-pack verify DIR`: re-checks everything a reader relies on, and reports every mismatch:
// checksums and sizes against the manifest, the shard's own invariants (ShardReader), parameters equal to
// the manifest's, ids inside the vocabulary, padding equal to pad_id with a zero loss mask, and the
// token accounting of the manifest's statistics. Returns 0 when all holds, 1 otherwise.
#include <atomic>
#include <mutex>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"
#include "pack/pack.hpp"

namespace fs = std::filesystem;

namespace ulysses::pack {
namespace {

class Problems {
 public:
  void add(const std::string& what) {
    std::lock_guard lock(mutex_);
    log_line("MISMATCH " + what);
    ++count_;
  }
  int count() const { return count_; }

 private:
  std::mutex mutex_;
  int count_ = 0;
};

// Returns the shard's non-padding token count.
std::uint64_t check_contents(const shard::ShardReader& r, const shard::Manifest& m, const std::string& file,
                             Problems& bad) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(m.seq_len));
  std::vector<std::uint8_t> mask(ids.size());
  std::uint64_t tokens = 0;
  for (std::int64_t s = 0; s < r.num_sequences(); ++s) {
    r.read(s, 0, m.seq_len, ids.data(), mask.data());
    const std::int32_t length = r.meta(s).length;
    tokens += static_cast<std::uint64_t>(length);
    for (std::int64_t i = 0; i < m.seq_len; ++i) {
      const std::int32_t id = ids[static_cast<std::size_t>(i)];
      const bool pad = i >= length;
      if (pad && (id != m.pad_id || (m.has_loss_mask && mask[static_cast<std::size_t>(i)] != 0))) {
        bad.add(fmt::format("{}: sequence {} position {} is padding but holds id {} mask {} (pad_id {})", file, s, i, id,
                            mask[static_cast<std::size_t>(i)], m.pad_id));
        break;
      }
      if (!pad && (id < 0 || (m.vocab_size > 0 && id >= m.vocab_size))) {
        bad.add(fmt::format("{}: sequence {} position {} holds id {} outside [0, {})", file, s, i, id, m.vocab_size));
        break;
      }
    }
  }
  return tokens;
}

// A count of the manifest's statistics (0 when absent): BadInput unless a non-negative integer (a string there
// escaped as nlohmann's type_error).
std::uint64_t stats_count(const nlohmann::json& stats, const char* key, const fs::path& dir) {
  if (!stats.is_object() || !stats.contains(key)) return 0;
  const nlohmann::json& v = stats.at(key);
  if (!v.is_number_unsigned())
    throw BadInput(fmt::format("{}/manifest.json: stats.{} is {}, not a non-negative integer", dir.string(), key,
                               printable(v.dump())),
                   "the manifest is damaged: re-pack the dataset");
  return v.get<std::uint64_t>();
}

}  // namespace

int run_verify(const fs::path& dir, int threads) {
  shard::Manifest m = shard::read_manifest(dir);
  Problems bad;
  std::atomic<std::uint64_t> tokens{0}, sequences{0};
  parallel_for(m.shards.size(), threads > 0 ? threads : 2, [&](std::size_t i) {
    const auto& s = m.shards[i];
    const fs::path path = dir / s.file;
    std::error_code ec;   // a name too long, a directory: a mismatch line, not a filesystem_error
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) return bad.add(fmt::format("{}: missing", s.file));
    if (!fs::is_regular_file(status)) return bad.add(fmt::format("{}: not a regular file", s.file));
    if (auto size = static_cast<std::int64_t>(fs::file_size(path)); size != s.bytes)
      bad.add(fmt::format("{}: {} bytes, manifest says {}", s.file, size, s.bytes));
    if (auto sum = xxh3_file_hex(path); sum != s.xxh3)
      bad.add(fmt::format("{}: xxh3 {}, manifest says {}", s.file, sum, s.xxh3));
    try {
      shard::ShardReader r(path);
      if (const std::string differ = shard::shard_mismatch(r.params(), m); !differ.empty())
        return bad.add(fmt::format("{}: {}", s.file, differ));   // its rows cannot be read by the manifest's sizes
      if (r.num_sequences() != s.num_sequences)
        bad.add(fmt::format("{}: {} sequences, manifest says {}", s.file, r.num_sequences(), s.num_sequences));
      tokens += check_contents(r, m, s.file, bad);
      sequences += static_cast<std::uint64_t>(r.num_sequences());
    } catch (const std::exception& e) {
      bad.add(fmt::format("{}: {}", s.file, e.what()));
    }
  });
  const auto stat = [&](const char* key) { return stats_count(m.stats, key, dir); };
  const std::uint64_t total = stat("tokens"), truncated = stat("truncated_tokens"), dropped = stat("dropped_tokens");
  if (truncated > total || dropped > total - truncated || tokens != total - truncated - dropped)
    bad.add(fmt::format("shards hold {} tokens; the manifest counts {} tokens, {} truncated and {} dropped",
                        tokens.load(), total, truncated, dropped));
  if (sequences != stat("sequences"))
    bad.add(fmt::format("shards hold {} sequences; the manifest says {}", sequences.load(), stat("sequences")));
  if (bad.count() == 0) {
    log_info("OK: {} shards, {} sequences, {} tokens verified", m.shards.size(), sequences.load(), tokens.load());
    return 0;
  }
  log_info("FAILED: {} mismatch(es)", bad.count());
  return 1;
}

}  // namespace ulysses::pack

// `ulysses-pack inspect DIR`: the manifest's statistics (with a loss mask, its target-token count), the shard list,
// and one sample sequence with its document boundaries marked, decoded as ids (or as bytes for byte-level corpora
// like datasets/sample), each document's target tokens counted and, with --show-mask, its mask beside it.
#include <algorithm>

#include "core/error.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"
#include "pack/pack.hpp"

namespace ulysses::pack {
namespace {

std::string render(std::span<const std::int32_t> ids, bool as_bytes) {
  std::string s;
  for (std::int32_t id : ids) {
    if (as_bytes && id >= 32 && id < 127) s += static_cast<char>(id);
    else if (as_bytes && id == '\n') s += "\\n";
    else if (as_bytes) s += fmt::format("<{}>", id);
    else s += fmt::format("{} ", id);
  }
  return s;
}

void print_sample(const std::filesystem::path& dir, const shard::Manifest& m, std::int64_t index,
                  std::int64_t max_tokens, bool as_bytes, bool show_mask) {
  auto it = std::find_if(m.shards.begin(), m.shards.end(), [](const auto& s) { return s.split == "train"; });
  if (it == m.shards.end()) return;
  shard::ShardReader reader(dir / it->file);
  if (index < 0 || index >= reader.num_sequences())
    throw BadInput(fmt::format("--sample {} is outside {} (it holds {} sequences)", index, it->file,
                               reader.num_sequences()),
                   fmt::format("pass --sample between 0 and {}", reader.num_sequences() - 1));
  if (const std::string differ = shard::shard_mismatch(reader.params(), m); !differ.empty())
    throw BadInput(fmt::format("{}: {}", it->file, differ), "the dataset is damaged: re-pack it");
  const auto& meta = reader.meta(index);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(m.seq_len));
  std::vector<std::uint8_t> mask(m.has_loss_mask ? static_cast<std::size_t>(m.seq_len) : 0);
  reader.read(index, 0, m.seq_len, ids.data(), m.has_loss_mask ? mask.data() : nullptr);
  fmt::print("\nsample: {} sequence {}: {} tokens, {} document(s), {} padding\n", it->file, index, meta.length,
             meta.doc_starts.size(), m.seq_len - meta.length);
  for (std::size_t d = 0; d < meta.doc_starts.size(); ++d) {
    const auto begin = static_cast<std::size_t>(meta.doc_starts[d]);
    const auto end = static_cast<std::size_t>(d + 1 < meta.doc_starts.size() ? meta.doc_starts[d + 1] : meta.length);
    const std::size_t shown = std::min(end - begin, static_cast<std::size_t>(max_tokens));
    const std::string targets =   // the mask's 1s in this document
        m.has_loss_mask ? fmt::format(" ({} target)", std::count(mask.begin() + begin, mask.begin() + end, 1)) : "";
    fmt::print("  [doc {} @ {}..{}{}] {}{}\n", d, begin, end, targets,
               render(std::span(ids).subspan(begin, shown), as_bytes), shown < end - begin ? " …" : "");
    if (show_mask && m.has_loss_mask) {
      std::string bits;
      for (std::size_t i = begin; i < begin + shown; ++i) bits += mask[i] ? '1' : '0';
      fmt::print("    mask {}{}\n", bits, shown < end - begin ? " …" : "");
    }
  }
}

}  // namespace

int run_inspect(const std::filesystem::path& dir, std::int64_t sample, std::int64_t max_tokens, bool as_bytes,
                bool show_mask) {
  shard::Manifest m = shard::read_manifest(dir);
  fmt::print("dataset {}\n  made by {}: {}\n", dir.string(), m.created_by, m.command);
  fmt::print("  seq_len {}  sp {}  alignment {}  pad_id {}  vocab {}  max id {}  loss mask {}  policy {}  seed {}\n",
             m.seq_len, m.sp, m.alignment, m.pad_id, m.vocab_size > 0 ? std::to_string(m.vocab_size) : "?",
             m.max_token_id, m.has_loss_mask ? "yes" : "no", m.policy, m.seed);
  fmt::print("statistics\n");
  for (const auto& [key, value] : m.stats.items()) fmt::print("  {:<20} {}\n", key, value.dump());
  fmt::print("inputs ({})\n", m.inputs.size());
  for (const auto& in : m.inputs)
    fmt::print("  {} [{}] {} bytes, {} documents, {} tokens, xxh3 {}\n", in.path, in.format, in.bytes, in.documents,
               in.tokens, in.xxh3);
  fmt::print("shards ({}): train {} sequences, valid {} sequences\n", m.shards.size(), m.num_sequences("train"),
             m.num_sequences("valid"));
  for (const auto& s : m.shards)
    fmt::print("  {} [{}] {} sequences, {} bytes, xxh3 {}\n", s.file, s.split, s.num_sequences, s.bytes, s.xxh3);
  if (sample >= 0) print_sample(dir, m, sample, max_tokens, as_bytes, show_mask);
  return 0;
}

}  // namespace ulysses::pack

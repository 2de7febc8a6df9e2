#include "io/shard_schema.hpp"

#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/sequence_parallel.hpp"

namespace ulysses::shard {
namespace detail {

std::string meta_problem(const SequenceMeta& m, std::int64_t seq_len) {
  if (m.length < 1 || m.length > seq_len)
    return fmt::format("length {} is outside [1, seq_len = {}]", m.length, seq_len);
  if (m.doc_starts.empty()) return "has no document start (the first must be 0)";
  if (m.doc_starts.front() != 0) return fmt::format("first document start is {}, not 0", m.doc_starts.front());
  for (std::size_t k = 1; k < m.doc_starts.size(); ++k)
    if (m.doc_starts[k] <= m.doc_starts[k - 1])
      return fmt::format("document starts {} then {} are not ascending", m.doc_starts[k - 1], m.doc_starts[k]);
  if (m.doc_starts.back() >= m.length)
    return fmt::format("document start {} is not below its length {}", m.doc_starts.back(), m.length);
  return "";
}

void check_params(const ShardParams& p, const std::string& where) {
  if (p.seq_len <= 0 || p.sp <= 0 || p.alignment <= 0)
    throw BadInput(fmt::format("{}: seq_len ({}), sp ({}) and alignment ({}) must be positive", where,
                               p.seq_len, p.sp, p.alignment),
                   "pack the dataset again with ulysses-pack (--seq-len, --sp and --align of 1 or more)");
  if (p.seq_len > std::numeric_limits<std::int32_t>::max())
    throw BadInput(fmt::format("{}: seq_len ({}) exceeds the int32 positions of the format", where, p.seq_len),
                   "pack sequences of at most 2147483647 tokens");
  const std::optional<std::int64_t> unit = split_unit(p.sp, p.alignment);
  if (!unit || p.seq_len % *unit != 0)
    throw BadInput(fmt::format("{}: seq_len ({}) is not a multiple of sp ({}) × alignment ({})", where,
                               p.seq_len, p.sp, p.alignment),
                   unit ? fmt::format("use a seq_len that is a multiple of {}", *unit)
                        : std::string("sp × alignment overflows: the file's attributes are damaged"));
}

}  // namespace detail

std::int64_t chunk_len_for(std::int64_t seq_len, std::int64_t sp) {
  ULY_CHECK(seq_len > 0 && sp > 0 && seq_len % sp == 0, "seq_len {} and sp {}", seq_len, sp);
  const std::int64_t slice = seq_len / sp;
  std::int64_t pieces = (slice + detail::kMaxChunkLen - 1) / detail::kMaxChunkLen;   // fewest chunks per slice
  while (slice % pieces != 0) ++pieces;
  return slice / pieces;
}

}  // namespace ulysses::shard

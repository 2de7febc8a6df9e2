#include "core/sequence_parallel.hpp"

#include <algorithm>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ulysses {
namespace {

constexpr std::int64_t kLargestSpListed = 1024;

// The hint: the nearest valid lengths, and the SP degrees that divide this length (at this alignment).
std::string split_hint(std::int64_t seq_len, std::int64_t unit, std::int64_t alignment) {
  const std::int64_t below = std::max(unit, seq_len / unit * unit);
  const std::int64_t above = (std::max<std::int64_t>(seq_len, 0) / unit + 1) * unit;
  std::string hint = below == above ? fmt::format("the nearest valid length is {}", below)
                                     : fmt::format("the nearest valid lengths are {} and {}", below, above);
  std::vector<std::int64_t> valid;
  for (std::int64_t p = 1; p <= std::min(seq_len, kLargestSpListed); ++p)
    if (seq_len % (p * alignment) == 0) valid.push_back(p);
  if (!valid.empty()) hint += fmt::format("; or use --sp {}", fmt::join(valid, ", "));
  return hint;
}

}  // namespace

std::optional<std::int64_t> split_unit(std::int64_t sp, std::int64_t alignment) {
  std::int64_t unit = 0;
  if (sp < 1 || alignment < 1 || __builtin_mul_overflow(sp, alignment, &unit)) return std::nullopt;
  return unit;
}

void check_sequence_split(std::int64_t seq_len, std::int64_t sp, const std::string& source, std::int64_t alignment) {
  if (sp < 1 || alignment < 1)
    throw BadInput(fmt::format("{}: the SP degree ({}) and the alignment ({}) must be positive", source, sp, alignment),
                   "pass --sp and --align of 1 or more (a dataset's manifest records those it was packed with)");
  if (seq_len < 1)
    throw BadInput(fmt::format("{}: the sequence length ({}) must be positive", source, seq_len),
                   fmt::format("a multiple of the SP degree × alignment ({} × {})", sp, alignment));
  const std::optional<std::int64_t> product = split_unit(sp, alignment);
  if (!product || (seq_len >= 1 && *product > seq_len))
    throw BadInput(fmt::format("{}: the SP degree ({}) × alignment ({}) exceeds the sequence length ({})", source, sp,
                               alignment, seq_len),
                   "each SP rank holds seq_len / SP tokens, a multiple of the alignment: use a smaller --sp or --align");
  const std::int64_t unit = *product;
  if (seq_len >= 1 && seq_len % unit == 0) return;
  const std::string aligned = alignment == 1 ? "" : fmt::format(" × alignment ({}) = {}", alignment, unit);
  throw BadInput(fmt::format("{}: sequence length ({}) is not divisible by the SP degree ({}){}", source, seq_len, sp,
                             aligned),
                 split_hint(seq_len, unit, alignment));
}

void check_ring_split(std::int64_t seq_len, std::int64_t sp, std::int64_t ring, const std::string& source,
                      std::int64_t alignment) {
  if (ring == 1) return check_sequence_split(seq_len, sp, source, alignment);
  const std::optional<std::int64_t> unit = split_unit(2 * sp, alignment);
  if (unit && seq_len >= *unit && seq_len % *unit == 0) return;
  const std::int64_t u = unit.value_or(2 * sp);
  throw BadInput(fmt::format("{}: sequence length ({}) is not divisible by 2 × --sp ({}){}: --sp-ring {} splits each "
                             "sequence into {} chunks of --sp / --sp-ring = {} equal pieces",
                             source, seq_len, sp, alignment == 1 ? "" : fmt::format(" × alignment ({})", alignment),
                             ring, 2 * ring, sp / ring),
                 fmt::format("the nearest valid lengths are {} and {}", std::max(u, seq_len / u * u),
                             (std::max<std::int64_t>(seq_len, 0) / u + 1) * u));
}

std::int64_t SequenceSlice::size() const {
  std::int64_t n = 0;
  for (const TokenRange& r : ranges) n += r.size();
  return n;
}

std::array<TokenRange, 2> ring_block(std::int64_t seq_len, std::int64_t ring, std::int64_t j) {
  const std::int64_t C = seq_len / (2 * ring), tail = 2 * ring - 1 - j;
  return {TokenRange{j * C, (j + 1) * C}, TokenRange{tail * C, (tail + 1) * C}};
}

SequenceParallel::SequenceParallel(const RankLayout& layout, int global_rank, comm::Communicator* ulysses,
                                   comm::Communicator* ring, comm::Communicator* ulysses_ahead)
    : degree_(layout.sp()), rank_(layout.sp_rank(global_rank)), ring_(layout.ring()),
      ulysses_(degree_ / ring_ > 1 ? ulysses : nullptr), ring_group_(ring_ > 1 ? ring : nullptr),
      ulysses_ahead_(degree_ / ring_ > 1 ? ulysses_ahead : nullptr) {}

SequenceSlice SequenceParallel::slice(std::int64_t seq_len, const std::string& source) const {
  check_ring_split(seq_len, degree_, ring_, source);
  if (ring_ == 1) {
    const std::int64_t local = seq_len / degree_;
    return {{TokenRange{rank_ * local, (rank_ + 1) * local}}};
  }
  const std::int64_t piece = seq_len / (2 * degree_), u = ulysses_rank();   // C / U tokens of each chunk
  SequenceSlice s;
  for (const TokenRange& chunk : ring_block(seq_len, ring_, ring_rank()))
    s.ranges.push_back({chunk.begin + u * piece, chunk.begin + (u + 1) * piece});
  return s;
}

}  // namespace ulysses

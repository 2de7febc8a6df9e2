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

SequenceParallel::SequenceParallel(const RankLayout& layout, int global_rank, comm::Communicator* group)
    : degree_(layout.sp()), rank_(layout.sp_rank(global_rank)), group_(degree_ > 1 ? group : nullptr) {}

SequenceSlice SequenceParallel::slice(std::int64_t seq_len, const std::string& source) const {
  check_sequence_split(seq_len, degree_, source);
  const std::int64_t local = seq_len / degree_;
  return {rank_ * local, (rank_ + 1) * local};
}

}  // namespace ulysses

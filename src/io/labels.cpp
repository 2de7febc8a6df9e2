// Labels, position ids and document ids of a slice, by the rules in labels.hpp (the public statement of
// them is docs/data-format.md). Each output position depends only on the sequence's metadata, its
// global position and the token (and mask byte) after it, so a slice gets exactly the values the whole
// sequence has there. One pass over the slice; the document lookup is a binary search at the slice start.
#include "io/labels.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "io/shard_format.hpp"

namespace ulysses::shard {
namespace {

// Walks the documents of one sequence for ascending positions g (first <= g < length).
class DocCursor {
 public:
  DocCursor(const SequenceMeta& meta, std::int64_t first)
      : starts_(meta.doc_starts),
        next_(static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin())) {}

  // Index of the document holding position g: the last start <= g.
  std::size_t doc_of(std::int64_t g) {
    while (next_ < starts_.size() && starts_[next_] <= g) ++next_;
    return next_ - 1;
  }
  std::int64_t start_of(std::size_t doc) const { return starts_[doc]; }

 private:
  const std::vector<std::int32_t>& starts_;
  std::size_t next_;   // the first document starting after the positions seen so far
};

void check_slice(const SequenceMeta& meta, std::int64_t begin) {
  ULY_CHECK(begin >= 0, "slice begins at {}", begin);
  ULY_CHECK(!meta.doc_starts.empty() && meta.doc_starts.front() == 0, "sequence metadata without a document at 0");
}

}  // namespace

void slice_labels(const SequenceMeta& meta, std::int64_t begin, std::span<const std::int32_t> ids_plus1,
                  std::span<const std::uint8_t> mask_plus1, std::span<std::int64_t> labels) {
  check_slice(meta, begin);
  const std::size_t n = labels.size();
  ULY_CHECK(ids_plus1.size() == n + 1 && mask_plus1.size() == n + 1,
            "{} labels need {} ids and mask bytes, got {} and {}", n, n + 1, ids_plus1.size(), mask_plus1.size());
  DocCursor docs(meta, begin);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t next = begin + static_cast<std::int64_t>(k) + 1;   // the target's position
    const bool is_target = next < meta.length && docs.start_of(docs.doc_of(next)) != next && mask_plus1[k + 1] == 1;
    labels[k] = is_target ? ids_plus1[k + 1] : kIgnoreIndex;
  }
}

void slice_positions(const SequenceMeta& meta, std::int64_t begin, std::span<std::int64_t> positions) {
  check_slice(meta, begin);
  DocCursor docs(meta, begin);
  for (std::size_t k = 0; k < positions.size(); ++k) {
    const std::int64_t g = begin + static_cast<std::int64_t>(k);
    positions[k] = g < meta.length ? g - docs.start_of(docs.doc_of(g)) : g - meta.length;
  }
}

void slice_doc_ids(const SequenceMeta& meta, std::int64_t begin, std::span<std::int64_t> doc_ids) {
  check_slice(meta, begin);
  DocCursor docs(meta, begin);
  const auto padding_doc = static_cast<std::int64_t>(meta.doc_starts.size());
  for (std::size_t k = 0; k < doc_ids.size(); ++k) {
    const std::int64_t g = begin + static_cast<std::int64_t>(k);
    doc_ids[k] = g < meta.length ? static_cast<std::int64_t>(docs.doc_of(g)) : padding_doc;
  }
}

}  // namespace ulysses::shard

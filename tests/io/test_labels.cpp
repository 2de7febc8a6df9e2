// Labels, position ids and document ids against hand-made tables, for the whole sequence and for every
// slicing of it (each slice must give exactly the whole sequence's values there).
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "io/labels.hpp"
#include "io/shard_format.hpp"

using namespace ulysses::shard;

namespace {

constexpr std::int64_t X = kIgnoreIndex;

struct Table {
  const char* name;
  std::int32_t length;                 // (SequenceMeta's fields, held apart: GCC 12 -O3 warns falsely
  std::vector<std::int32_t> starts;    //  on a nested aggregate of this shape)
  std::vector<std::int32_t> ids;       // [S]
  std::vector<std::uint8_t> mask;      // [S]
  std::vector<std::int64_t> labels;    // [S], by hand
  std::vector<std::int64_t> positions; // [S], by hand
  std::vector<std::int64_t> docs;      // [S], by hand
};

// S = 12 throughout; pad id 0.
const std::vector<Table> kTables = {
    {"three_docs_masked_padded",
     10, {0, 4, 7},
     {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 0, 0},
     {1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 0},
     {101, X, 103, X, 105, 106, X, X, 109, X, X, X},
     {0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 0, 1},
     {0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3}},
    {"two_docs_full",
     12, {0, 6},
     {50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61},
     {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
     {51, 52, 53, 54, 55, X, 57, 58, 59, 60, 61, X},
     {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5},
     {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}},
    {"one_token",
     1, {0},
     {7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
     {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
     {X, X, X, X, X, X, X, X, X, X, X, X},
     {0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
     {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
    {"one_token_docs_mask_on_first",
     5, {0, 1, 2, 3},
     {20, 21, 22, 23, 24, 0, 0, 0, 0, 0, 0, 0},
     {0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0},
     {X, X, X, 24, X, X, X, X, X, X, X, X},
     {0, 0, 0, 0, 1, 0, 1, 2, 3, 4, 5, 6},
     {0, 1, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4}},
};

// Values of slice [begin, begin + n): the +1 token after the slice, or a junk value past the end.
struct Slice {
  std::vector<std::int64_t> labels, positions, docs;
};

Slice derive(const Table& t, std::int64_t begin, std::int64_t n) {
  const auto S = static_cast<std::int64_t>(t.ids.size());
  std::vector<std::int32_t> ids_plus1(t.ids.begin() + begin, t.ids.begin() + begin + n);
  std::vector<std::uint8_t> mask_plus1(t.mask.begin() + begin, t.mask.begin() + begin + n);
  ids_plus1.push_back(begin + n < S ? t.ids[static_cast<std::size_t>(begin + n)] : 987654);
  mask_plus1.push_back(begin + n < S ? t.mask[static_cast<std::size_t>(begin + n)] : 1);
  const auto size = static_cast<std::size_t>(n);
  Slice s{std::vector<std::int64_t>(size), std::vector<std::int64_t>(size), std::vector<std::int64_t>(size)};
  const SequenceMeta meta{t.length, t.starts};
  slice_labels(meta, begin, ids_plus1, mask_plus1, s.labels);
  slice_positions(meta, begin, s.positions);
  slice_doc_ids(meta, begin, s.docs);
  return s;
}

std::vector<std::int64_t> part(const std::vector<std::int64_t>& v, std::int64_t begin, std::int64_t n) {
  return {v.begin() + begin, v.begin() + begin + n};
}

}  // namespace

TEST(Labels, WholeSequenceMatchesHandTables) {
  for (const Table& t : kTables) {
    SCOPED_TRACE(t.name);
    const Slice s = derive(t, 0, 12);
    EXPECT_EQ(s.labels, t.labels);
    EXPECT_EQ(s.positions, t.positions);
    EXPECT_EQ(s.docs, t.docs);
  }
}

TEST(Labels, EverySlicingMatchesTheWholeSequence) {
  int slices_checked = 0;
  for (const Table& t : kTables) {
    for (std::int64_t sp : {1, 2, 3, 4, 6, 12}) {
      const std::int64_t n = 12 / sp;
      for (std::int64_t r = 0; r < sp; ++r) {
        SCOPED_TRACE(::testing::Message() << t.name << " sp=" << sp << " rank=" << r);
        const Slice s = derive(t, r * n, n);
        EXPECT_EQ(s.labels, part(t.labels, r * n, n));
        EXPECT_EQ(s.positions, part(t.positions, r * n, n));
        EXPECT_EQ(s.docs, part(t.docs, r * n, n));
        ++slices_checked;
      }
    }
  }
  EXPECT_EQ(slices_checked, 4 * (1 + 2 + 3 + 4 + 6 + 12));
}

TEST(Labels, UnalignedSlicesToo) {
  const Table& t = kTables[0];
  for (std::int64_t begin = 0; begin < 12; ++begin)
    for (std::int64_t n = 0; begin + n <= 12; ++n) {
      SCOPED_TRACE(::testing::Message() << "begin=" << begin << " n=" << n);
      const Slice s = derive(t, begin, n);
      EXPECT_EQ(s.labels, part(t.labels, begin, n));
      EXPECT_EQ(s.positions, part(t.positions, begin, n));
      EXPECT_EQ(s.docs, part(t.docs, begin, n));
    }
}

TEST(Labels, WrongBufferSizesAreCaught) {
  const Table& t = kTables[0];
  std::vector<std::int32_t> ids(4);
  std::vector<std::uint8_t> mask(5);
  std::vector<std::int64_t> labels(4);
  EXPECT_THROW(slice_labels({t.length, t.starts}, 0, ids, mask, labels), std::logic_error);
}

// ShardWriter/ShardReader: round trips with token id = global position (seq * S + i), several appends,
// with and without loss_mask; the chunk layout; every SP rank's slice (+1 token) against the whole
// sequence; readers on several threads; malformed files → BadInput naming the file and the numbers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "core/error.hpp"
#include "io/labels.hpp"
#include "io/shard.hpp"
#include "io/shard_format.hpp"

namespace fs = std::filesystem;
using namespace ulysses::shard;
using ulysses::BadInput;

namespace {

constexpr std::int64_t kS = 256, kSp = 4, kSlice = kS / kSp, kAlignment = 16, kPadId = 99999;

// Documents start on slice edges (64, 128, 192) and beside them; sequences end mid-slice, on an edge,
// one past an edge, after one token, or not at all.
const std::vector<SequenceMeta> kMetas = {
    {256, {0}},
    {256, {0, 64, 128, 192}},
    {200, {0, 63, 65}},
    {129, {0, 100, 128}},
    {1, {0}},
    {64, {0, 10}},
    {255, {0, 127, 254}},
};
const auto kN = static_cast<std::int64_t>(kMetas.size());

std::int32_t token(std::int64_t seq, std::int64_t i) {
  return i < kMetas[static_cast<std::size_t>(seq)].length ? static_cast<std::int32_t>(seq * kS + i)
                                                          : static_cast<std::int32_t>(kPadId);
}
// Masked-out targets fall on varied positions, slice edges included (e.g. seq 6, position 64).
std::uint8_t mask_bit(std::int64_t seq, std::int64_t i) {
  return i < kMetas[static_cast<std::size_t>(seq)].length && (seq + i) % 7 != 0;
}

std::vector<std::int32_t> expected_ids(std::int64_t seq) {   // [S]
  std::vector<std::int32_t> v(kS);
  for (std::int64_t i = 0; i < kS; ++i) v[static_cast<std::size_t>(i)] = token(seq, i);
  return v;
}
std::vector<std::uint8_t> expected_mask(std::int64_t seq, bool has_mask) {   // [S]
  std::vector<std::uint8_t> v(kS);
  for (std::int64_t i = 0; i < kS; ++i) v[static_cast<std::size_t>(i)] = has_mask ? mask_bit(seq, i) : 1;
  return v;
}

// Writes kMetas in blocks of the given sizes (they sum to kN).
void write_shard(const fs::path& path, bool has_mask, const std::vector<std::int64_t>& blocks = {3, 1, 3}) {
  ShardWriter w(path, {kS, kSp, kAlignment, kPadId, has_mask}, kN);
  std::int64_t seq = 0;
  for (std::int64_t n : blocks) {
    std::vector<std::int32_t> ids;     // [n, S]
    std::vector<std::uint8_t> mask;    // [n, S] or empty
    for (std::int64_t k = seq; k < seq + n; ++k) {
      const auto row = expected_ids(k);
      ids.insert(ids.end(), row.begin(), row.end());
      if (has_mask) {
        const auto m = expected_mask(k, true);
        mask.insert(mask.end(), m.begin(), m.end());
      }
    }
    w.append(ids, mask, std::span(kMetas).subspan(static_cast<std::size_t>(seq), static_cast<std::size_t>(n)));
    seq += n;
  }
  w.close();
}

// Labels of the whole sequence straight from the rule in labels.hpp (a reference, not the library).
std::vector<std::int64_t> reference_labels(std::int64_t seq, bool has_mask) {
  const SequenceMeta& m = kMetas[static_cast<std::size_t>(seq)];
  std::vector<std::int64_t> labels(kS, kIgnoreIndex);
  for (std::int64_t i = 0; i + 1 < m.length; ++i) {
    const bool starts_doc = std::find(m.doc_starts.begin(), m.doc_starts.end(), i + 1) != m.doc_starts.end();
    if (!starts_doc && expected_mask(seq, has_mask)[static_cast<std::size_t>(i + 1)] == 1)
      labels[static_cast<std::size_t>(i)] = token(seq, i + 1);
  }
  return labels;
}

// Throws unless an HDF5 call in a test helper succeeded.
hid_t h5(hid_t r) {
  if (r < 0) throw std::runtime_error("HDF5 call in a test helper failed");
  return r;
}

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          (std::string("uly-shard-") + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    path = dir / "shard-00000.h5";
  }
  void TearDown() override { fs::remove_all(dir); }

  // Opens the shard read-write, lets `edit` change it, closes it.
  void edit(const std::function<void(hid_t)>& change) const {
    const hid_t f = h5(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    change(f);
    h5(H5Fclose(f));
  }

  // The reader's BadInput message for the shard, asserting it names the file.
  std::string bad_input_message() const {
    try {
      ShardReader r(path);
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no BadInput for " << path;
    return "";
  }

  fs::path dir, path;
};

void replace_int_attr(hid_t f, const char* name, std::int64_t value) {
  const hid_t a = h5(H5Aopen(f, name, H5P_DEFAULT));
  h5(H5Awrite(a, H5T_NATIVE_INT64, &value));
  h5(H5Aclose(a));
}

// Replaces a string attribute by a fixed-length one (what h5py writes for numpy bytes).
void replace_string_attr(hid_t f, const char* name, const std::string& value) {
  h5(H5Adelete(f, name));
  const hid_t t = h5(H5Tcopy(H5T_C_S1));
  h5(H5Tset_size(t, value.size()));
  const hid_t s = h5(H5Screate(H5S_SCALAR));
  const hid_t a = h5(H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT));
  h5(H5Awrite(a, t, value.data()));
  h5(H5Aclose(a));
  h5(H5Sclose(s));
  h5(H5Tclose(t));
}

// Reads a whole 1-D dataset, lets `change` edit the values, writes them back (same shape).
template <typename T>
void edit_vector(hid_t f, const char* name, hid_t mem_type, const std::function<void(std::vector<T>&)>& change) {
  const hid_t d = h5(H5Dopen2(f, name, H5P_DEFAULT));
  const hid_t s = h5(H5Dget_space(d));
  std::vector<T> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  h5(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  change(v);
  h5(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  h5(H5Sclose(s));
  h5(H5Dclose(d));
}

// Replaces a dataset by an empty one of another dtype/shape.
void replace_dataset(hid_t f, const char* name, hid_t type, const std::vector<std::int64_t>& shape) {
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  h5(H5Ldelete(f, name, H5P_DEFAULT));
  const hid_t s = h5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  h5(H5Dclose(h5(H5Dcreate2(f, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT))));
  h5(H5Sclose(s));
}

}  // namespace

TEST(ChunkLen, LargestDivisorOfTheSliceUpTo65536) {
  struct Row {
    std::int64_t seq_len, sp, chunk_len;
  };
  const std::vector<Row> table = {
      {4096, 1, 4096},       {65536, 1, 65536},     {131072, 1, 65536},   {131072, 8, 16384},
      {196608, 1, 65536},    {122880, 1, 61440},    {65984, 1, 32992},    {1048576, 8, 65536},
      {3 * 65536 * 4, 4, 65536}, {384, 3, 128},     {256, 4, 64},
  };
  for (const Row& r : table) EXPECT_EQ(chunk_len_for(r.seq_len, r.sp), r.chunk_len) << r.seq_len << " / " << r.sp;
}

class ShardRoundTrip : public ShardTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ShardRoundTrip, WholeSequencesAndMetadata) {
  const bool has_mask = GetParam();
  write_shard(path, has_mask);
  ShardReader r(path);
  EXPECT_EQ(r.params().seq_len, kS);
  EXPECT_EQ(r.params().sp, kSp);
  EXPECT_EQ(r.params().alignment, kAlignment);
  EXPECT_EQ(r.params().pad_id, kPadId);
  EXPECT_EQ(r.params().has_loss_mask, has_mask);
  ASSERT_EQ(r.num_sequences(), kN);
  for (std::int64_t seq = 0; seq < kN; ++seq) {
    SCOPED_TRACE(seq);
    EXPECT_EQ(r.meta(seq).length, kMetas[static_cast<std::size_t>(seq)].length);
    EXPECT_EQ(r.meta(seq).doc_starts, kMetas[static_cast<std::size_t>(seq)].doc_starts);
    std::vector<std::int32_t> ids(kS, -7);
    std::vector<std::uint8_t> mask(kS, 7);
    r.read(seq, 0, kS, ids.data(), mask.data());
    EXPECT_EQ(ids, expected_ids(seq));
    EXPECT_EQ(mask, expected_mask(seq, has_mask));
  }
}

TEST_P(ShardRoundTrip, BlockSizesDoNotMatter) {
  for (const auto& blocks : std::vector<std::vector<std::int64_t>>{{7}, {1, 1, 1, 1, 1, 1, 1}, {0, 6, 1}}) {
    write_shard(path, GetParam(), blocks);
    ShardReader r(path);
    for (std::int64_t seq = 0; seq < kN; ++seq) {
      std::vector<std::int32_t> ids(kS);
      r.read(seq, 0, kS, ids.data(), nullptr);
      EXPECT_EQ(ids, expected_ids(seq)) << "seq " << seq << ", " << blocks.size() << " blocks";
    }
  }
}

TEST_P(ShardRoundTrip, SpSlicesConcatenateToTheSequence) {
  const bool has_mask = GetParam();
  write_shard(path, has_mask);
  ShardReader r(path);
  for (std::int64_t seq = 0; seq < kN; ++seq) {
    std::vector<std::int32_t> joined_ids;
    std::vector<std::uint8_t> joined_mask;
    for (std::int64_t rank = 0; rank < kSp; ++rank) {
      std::vector<std::int32_t> ids(kSlice);   // [S/P]
      std::vector<std::uint8_t> mask(kSlice);
      r.read(seq, rank * kSlice, kSlice, ids.data(), mask.data());
      joined_ids.insert(joined_ids.end(), ids.begin(), ids.end());
      joined_mask.insert(joined_mask.end(), mask.begin(), mask.end());
    }
    EXPECT_EQ(joined_ids, expected_ids(seq)) << "seq " << seq;
    EXPECT_EQ(joined_mask, expected_mask(seq, has_mask)) << "seq " << seq;
  }
}

// Rank r reads [r·S/P, (r+1)·S/P] (+1 token except the last rank) and derives its labels: they equal the
// whole sequence's, and its last label is rank r+1's first token unless that token starts a document,
// is padding, or is masked out.
TEST_P(ShardRoundTrip, SliceLabelsEqualTheWholeSequenceLabels) {
  const bool has_mask = GetParam();
  write_shard(path, has_mask);
  ShardReader r(path);
  int edges_with_a_label = 0, edges_ignored = 0;
  for (std::int64_t seq = 0; seq < kN; ++seq) {
    const std::vector<std::int64_t> whole = reference_labels(seq, has_mask);
    for (std::int64_t rank = 0; rank < kSp; ++rank) {
      SCOPED_TRACE(::testing::Message() << "seq " << seq << " rank " << rank);
      const std::int64_t begin = rank * kSlice;
      const std::int64_t n_read = std::min(kSlice + 1, kS - begin);   // +1 token except on the last rank
      std::vector<std::int32_t> ids(kSlice + 1, -7);                 // [S/P + 1]
      std::vector<std::uint8_t> mask(kSlice + 1, 1);
      r.read(seq, begin, n_read, ids.data(), mask.data());
      std::vector<std::int64_t> labels(kSlice);                       // [S/P]
      slice_labels(r.meta(seq), begin, ids, mask, labels);
      EXPECT_EQ(labels, std::vector<std::int64_t>(whole.begin() + begin, whole.begin() + begin + kSlice));
      if (rank + 1 == kSp) continue;
      const std::int64_t next = begin + kSlice;   // rank + 1's first position
      const auto& starts = kMetas[static_cast<std::size_t>(seq)].doc_starts;
      const bool ignored = next >= kMetas[static_cast<std::size_t>(seq)].length ||
                           std::find(starts.begin(), starts.end(), next) != starts.end() ||
                           (has_mask && mask_bit(seq, next) == 0);
      EXPECT_EQ(labels.back(), ignored ? kIgnoreIndex : token(seq, next));
      (ignored ? edges_ignored : edges_with_a_label)++;
    }
  }
  EXPECT_GT(edges_with_a_label, 5);   // the data exercises both kinds of edge
  EXPECT_GT(edges_ignored, 5);
}

INSTANTIATE_TEST_SUITE_P(MaskOrNot, ShardRoundTrip, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "with_mask" : "without_mask"; });

TEST_F(ShardTest, LayoutIsChunkedRowsWithoutFilters) {
  write_shard(path, true);
  const hid_t f = h5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  for (const char* name : {kInputIds, kLossMask}) {
    const hid_t d = h5(H5Dopen2(f, name, H5P_DEFAULT));
    const hid_t dcpl = h5(H5Dget_create_plist(d));
    hsize_t chunk[2] = {0, 0};
    EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED) << name;
    EXPECT_EQ(H5Pget_chunk(dcpl, 2, chunk), 2) << name;
    EXPECT_EQ(chunk[0], 1u) << name;
    EXPECT_EQ(chunk[1], static_cast<hsize_t>(chunk_len_for(kS, kSp))) << name;
    EXPECT_EQ(H5Pget_nfilters(dcpl), 0) << name;
    h5(H5Pclose(dcpl));
    h5(H5Dclose(d));
  }
  std::int64_t chunk_len = 0;
  const hid_t a = h5(H5Aopen(f, kAttrChunkLen, H5P_DEFAULT));
  h5(H5Aread(a, H5T_NATIVE_INT64, &chunk_len));
  EXPECT_EQ(chunk_len, 64);
  h5(H5Aclose(a));
  h5(H5Fclose(f));
}

// No timestamps or other run-dependent bytes: the packer's output is reproducible and so are its checksums.
TEST_F(ShardTest, SameContentSameBytes) {
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  write_shard(path, true);
  const std::string first = bytes(path);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));   // HDF5 times have 1 s resolution
  write_shard(path, true, {1, 5, 1});
  EXPECT_TRUE(first == bytes(path));   // other appends, same bytes
}

TEST_F(ShardTest, ReadersOnSeveralThreads) {
  write_shard(path, true);
  std::atomic<int> mismatches{0}, reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        ShardReader r(path);
        for (int round = 0; round < 20; ++round)
          for (std::int64_t seq = 0; seq < kN; ++seq) {
            const std::int64_t begin = ((seq + t + round) % kSp) * kSlice;
            std::vector<std::int32_t> ids(kSlice);
            r.read(seq, begin, kSlice, ids.data(), nullptr);
            const auto want = expected_ids(seq);
            if (!std::equal(ids.begin(), ids.end(), want.begin() + begin)) ++mismatches;
            ++reads;
          }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(reads, 4 * 20 * kN);
}

TEST_F(ShardTest, WriterContract) {
  ShardParams p{kS, kSp, kAlignment, kPadId, false};
  {
    ShardWriter w(path, p, 2);
    const auto ids = expected_ids(0);
    w.append(ids, {}, std::span(kMetas).first(1));
    EXPECT_THROW(w.close(), std::runtime_error);   // 1 of 2 sequences
  }
  {
    ShardWriter w(path, p, 1);
    std::vector<std::int32_t> ids(2 * kS);
    EXPECT_THROW(w.append(ids, {}, std::span(kMetas).first(2)), std::logic_error);   // more than announced
    const std::vector<SequenceMeta> bad = {{10, {0, 12}}};
    EXPECT_THROW(w.append(std::span(ids).first(kS), {}, bad), std::logic_error);     // start past length
  }
  p.seq_len = 200;   // not a multiple of sp × alignment = 64
  EXPECT_THROW(ShardWriter(path, p, 1), BadInput);
}

TEST_F(ShardTest, FixedLengthFormatStringIsAccepted) {   // h5py writes numpy bytes this way
  write_shard(path, false);
  edit([](hid_t f) { replace_string_attr(f, kAttrFormat, kFormatName); });
  EXPECT_EQ(ShardReader(path).num_sequences(), kN);
}

TEST_F(ShardTest, WrongFormatName) {
  write_shard(path, false);
  edit([](hid_t f) { replace_string_attr(f, kAttrFormat, "other-format"); });
  EXPECT_NE(bad_input_message().find("other-format"), std::string::npos);
}

TEST_F(ShardTest, WrongVersion) {
  write_shard(path, false);
  edit([](hid_t f) { replace_int_attr(f, kAttrVersion, 2); });
  EXPECT_NE(bad_input_message().find("format_version is 2"), std::string::npos);
}

TEST_F(ShardTest, MissingAttribute) {
  write_shard(path, false);
  edit([](hid_t f) { h5(H5Adelete(f, kAttrSeqLen)); });
  EXPECT_NE(bad_input_message().find("\"seq_len\" is missing"), std::string::npos);
}

TEST_F(ShardTest, SeqLenNotDivisibleBySp) {
  write_shard(path, false);
  edit([](hid_t f) { replace_int_attr(f, kAttrSp, 3); });
  EXPECT_NE(bad_input_message().find("seq_len (256) is not a multiple of sp (3)"), std::string::npos);
}

TEST_F(ShardTest, ChunkLenNotDividingTheSlice) {
  write_shard(path, false);
  edit([](hid_t f) { replace_int_attr(f, kAttrChunkLen, 48); });
  EXPECT_NE(bad_input_message().find("chunk_len (48)"), std::string::npos);
}

TEST_F(ShardTest, WrongDtype) {
  write_shard(path, false);
  edit([](hid_t f) { replace_dataset(f, kInputIds, H5T_IEEE_F32LE, {kN, kS}); });
  EXPECT_NE(bad_input_message().find("\"input_ids\" must have dtype int32"), std::string::npos);
}

TEST_F(ShardTest, WrongShapes) {
  write_shard(path, true);
  edit([](hid_t f) { replace_dataset(f, kSeqLengths, H5T_STD_I32LE, {kN - 1}); });
  EXPECT_NE(bad_input_message().find("\"seq_lengths\" has shape [6], expected [7]"), std::string::npos);
  write_shard(path, true);
  edit([](hid_t f) { replace_dataset(f, kLossMask, H5T_STD_U8LE, {kN, kS / 2}); });
  EXPECT_NE(bad_input_message().find("\"loss_mask\" has shape [7, 128], expected [7, 256]"), std::string::npos);
  write_shard(path, true);
  edit([](hid_t f) { replace_dataset(f, kInputIds, H5T_STD_I32LE, {kN, kS + 1}); });
  EXPECT_NE(bad_input_message().find("expected [N, 256]"), std::string::npos);
}

TEST_F(ShardTest, MissingDataset) {
  write_shard(path, false);
  edit([](hid_t f) { h5(H5Ldelete(f, kDocStarts, H5P_DEFAULT)); });
  EXPECT_NE(bad_input_message().find("\"doc_starts\" is missing"), std::string::npos);
}

// Each edit breaks one rule of the CSR; the message names the sequence and the numbers.
TEST_F(ShardTest, InconsistentDocumentCsr) {
  // doc_starts: [0 | 0 64 128 192 | 0 63 65 | 0 100 128 | 0 | 0 10 | 0 127 254], offsets 0 1 5 8 11 12 14 17
  struct Case {
    const char* what;
    std::function<void(hid_t)> change;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"starts not ascending",
       [](hid_t f) {
         edit_vector<std::int32_t>(f, kDocStarts, H5T_NATIVE_INT32, [](auto& v) { std::swap(v[2], v[3]); });
       },
       "sequence 1: document starts 128 then 64 are not ascending"},
      {"first start not 0",
       [](hid_t f) { edit_vector<std::int32_t>(f, kDocStarts, H5T_NATIVE_INT32, [](auto& v) { v[5] = 5; }); },
       "sequence 2: first document start is 5, not 0"},
      {"start at the length",
       [](hid_t f) { edit_vector<std::int32_t>(f, kDocStarts, H5T_NATIVE_INT32, [](auto& v) { v[13] = 64; }); },
       "sequence 5: document start 64 is not below its length 64"},
      {"length over seq_len",
       [](hid_t f) { edit_vector<std::int32_t>(f, kSeqLengths, H5T_NATIVE_INT32, [](auto& v) { v[3] = 300; }); },
       "sequence 3: length 300 is outside [1, seq_len = 256]"},
      {"offsets decrease",
       [](hid_t f) { edit_vector<std::int64_t>(f, kDocOffsets, H5T_NATIVE_INT64, [](auto& v) { v[3] = 4; }); },
       "doc_offsets decreases at sequence 2 (5 then 4)"},
      {"offsets not from 0",
       [](hid_t f) { edit_vector<std::int64_t>(f, kDocOffsets, H5T_NATIVE_INT64, [](auto& v) { v[0] = 1; }); },
       "doc_offsets[0] is 1, not 0"},
      {"offsets end past D",
       [](hid_t f) { edit_vector<std::int64_t>(f, kDocOffsets, H5T_NATIVE_INT64, [](auto& v) { v.back() = 18; }); },
       "\"doc_starts\" has shape [17], expected [18] (D = doc_offsets[N])"},
      {"a sequence without documents",
       [](hid_t f) { edit_vector<std::int64_t>(f, kDocOffsets, H5T_NATIVE_INT64, [](auto& v) { v[5] = 11; }); },
       "sequence 4: has no document start"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_shard(path, false);
    edit(c.change);
    const std::string msg = bad_input_message();
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
}

TEST_F(ShardTest, TruncatedGarbageEmptyAndMissingFiles) {
  write_shard(path, true);
  const auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  EXPECT_THROW(ShardReader{path}, BadInput);
  const std::string truncated = bad_input_message();
  EXPECT_NE(truncated.find("H5Fopen failed"), std::string::npos) << truncated;

  std::ofstream(path, std::ios::trunc) << "this is not an HDF5 file, just some text\n";
  EXPECT_NE(bad_input_message().find("H5Fopen failed"), std::string::npos);

  std::ofstream(path, std::ios::trunc).close();
  EXPECT_NE(bad_input_message().find("H5Fopen failed"), std::string::npos);

  fs::remove(path);
  EXPECT_NE(bad_input_message().find("does not exist"), std::string::npos);
}

// Megatron indexed datasets written byte by byte to the MMIDIDX v1 spec, for every dtype: documents
// of several sequences read back exactly; each inconsistency between header, .idx and .bin is a
// BadInput naming the file, the byte offset and the numbers.
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace ulysses::pack::testing {
namespace {

using Sequences = std::vector<Doc>;   // a document: its sequences

// Documents of 1 to 3 sequences, one empty document, one empty sequence.
std::vector<Sequences> sample_documents(int modulus) {
  std::vector<Sequences> docs;
  int d = 0;
  for (const std::vector<int>& lengths : std::vector<std::vector<int>>{
           {7}, {3, 4, 5}, {}, {1}, {10, 0, 2}, {600}, {2, 2}}) {
    Sequences doc;
    for (const int length : lengths) doc.push_back(make_doc(d++, length, modulus));
    docs.push_back(doc);
  }
  return docs;
}

Doc concat(const Sequences& doc) {
  Doc all;
  for (const Doc& s : doc) all.insert(all.end(), s.begin(), s.end());
  return all;
}

struct Layout {
  bool reverse_bin = false;   // store sequences in the .bin in reverse order (documents not contiguous)
  bool multimodal = false;    // append the int8 sequence modes
};

// Writes prefix.bin and prefix.idx; token values are cast to T.
template <class T>
void write_megatron(const std::filesystem::path& prefix, std::uint8_t dtype_code,
                    const std::vector<Sequences>& docs, Layout layout = {}) {
  std::vector<Doc> sequences;
  std::vector<std::int64_t> doc_index = {0};
  for (const Sequences& doc : docs) {
    sequences.insert(sequences.end(), doc.begin(), doc.end());
    doc_index.push_back(static_cast<std::int64_t>(sequences.size()));
  }
  std::vector<std::int64_t> pointers(sequences.size());
  std::string bin;
  const auto place = [&](std::size_t j) {
    pointers[j] = static_cast<std::int64_t>(bin.size());
    for (const std::int32_t id : sequences[j]) put(bin, static_cast<T>(id));
  };
  for (std::size_t j = 0; j < sequences.size(); ++j) place(layout.reverse_bin ? sequences.size() - 1 - j : j);

  std::string idx("MMIDIDX\0\0", 9);
  put<std::uint64_t>(idx, 1);
  put<std::uint8_t>(idx, dtype_code);
  put<std::uint64_t>(idx, sequences.size());
  put<std::uint64_t>(idx, doc_index.size());
  for (const Doc& s : sequences) put<std::int32_t>(idx, static_cast<std::int32_t>(s.size()));
  for (const std::int64_t p : pointers) put(idx, p);
  for (const std::int64_t i : doc_index) put(idx, i);
  if (layout.multimodal) idx.append(sequences.size(), '\0');
  write_file(prefix.string() + ".bin", bin);
  write_file(prefix.string() + ".idx", idx);
}

template <class T>
void expect_round_trip(std::uint8_t dtype_code, int modulus) {
  TempDir dir;
  const auto docs = sample_documents(modulus);
  write_megatron<T>(dir / "data", dtype_code, docs);
  for (const char* given : {"data", "data.bin", "data.idx"}) {
    SCOPED_TRACE(given);
    ReaderOptions o;
    o.format = Format::kMegatron;
    const Scanned s = scan(dir / given, o, 5);
    const ReadBack back = read_all(s);
    std::vector<Doc> expected;
    for (const Sequences& doc : docs) {
      if (!concat(doc).empty()) expected.push_back(concat(doc));
    }
    ASSERT_EQ(back.ids.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(back.ids[i], expected[i]) << "document " << i;
      EXPECT_EQ(back.masks[i], std::vector<std::uint8_t>(expected[i].size(), 1));
      EXPECT_EQ(s.docs[i].source, 5u);
    }
    EXPECT_FALSE(s.source->has_loss_mask());
    EXPECT_EQ(s.source->name(), (dir / "data.bin").string());
    EXPECT_EQ(s.stats.documents, expected.size());
    EXPECT_EQ(s.stats.empty_documents, 1u);
    std::uint64_t tokens = 0;
    std::int64_t max_id = -1;
    for (const Doc& d : expected) {
      tokens += d.size();
      max_id = std::max<std::int64_t>(max_id, *std::max_element(d.begin(), d.end()));
    }
    EXPECT_EQ(s.stats.tokens, tokens);
    EXPECT_EQ(s.stats.max_id, max_id);
    EXPECT_EQ(s.stats.input_bytes, std::filesystem::file_size(dir / "data.bin") +
                                       std::filesystem::file_size(dir / "data.idx"));
  }
}

TEST(Megatron, RoundTripUint8) { expect_round_trip<std::uint8_t>(1, 256); }
TEST(Megatron, RoundTripInt8) { expect_round_trip<std::int8_t>(2, 128); }
TEST(Megatron, RoundTripInt16) { expect_round_trip<std::int16_t>(3, 32768); }
TEST(Megatron, RoundTripInt32) { expect_round_trip<std::int32_t>(4, 2000000000); }
TEST(Megatron, RoundTripInt64) { expect_round_trip<std::int64_t>(5, 2000000000); }
TEST(Megatron, RoundTripFloat64) { expect_round_trip<double>(6, 2000000000); }
TEST(Megatron, RoundTripFloat32) { expect_round_trip<float>(7, 1 << 24); }
TEST(Megatron, RoundTripUint16) { expect_round_trip<std::uint16_t>(8, 65536); }

TEST(Megatron, NonContiguousDocumentsBecomeOneDocRefPerSequence) {
  TempDir dir;
  const auto docs = sample_documents(65536);
  write_megatron<std::uint16_t>(dir / "rev", 8, docs, {.reverse_bin = true});
  const Scanned s = scan(dir / "rev.idx", ReaderOptions{});
  std::vector<Doc> expected;
  for (const Sequences& doc : docs) {
    if (doc.size() == 1) {
      expected.push_back(doc[0]);   // one sequence: contiguous
    } else {
      for (const Doc& seq : doc) {
        if (!seq.empty()) expected.push_back(seq);
      }
    }
  }
  EXPECT_EQ(read_all(s).ids, expected);
}

TEST(Megatron, MultimodalModesAreAccepted) {
  TempDir dir;
  const auto docs = sample_documents(65536);
  write_megatron<std::int32_t>(dir / "mm", 4, docs, {.multimodal = true});
  const Scanned s = scan(dir / "mm", ReaderOptions{});
  EXPECT_EQ(read_all(s).ids.front(), concat(docs.front()));
}

// A valid uint16 dataset "d" whose files a test then damages.
struct Damaged {
  TempDir dir;
  std::string idx, bin;
  Damaged() {
    write_megatron<std::uint16_t>(dir / "d", 8, sample_documents(1000));
    idx = read_file(dir / "d.idx");
    bin = read_file(dir / "d.bin");
  }
  std::filesystem::path save() {
    write_file(dir / "d.idx", idx);
    write_file(dir / "d.bin", bin);
    return dir / "d.bin";
  }
  std::string idx_name() const { return (dir / "d.idx").string(); }
  std::string bin_name() const { return (dir / "d.bin").string(); }
};

constexpr std::size_t kSequences = 11;    // in sample_documents
constexpr std::size_t kPointers = 34 + 4 * kSequences;
constexpr std::size_t kDocIndex = kPointers + 8 * kSequences;

TEST(MegatronErrors, BadMagic) {
  Damaged d;
  d.idx[6] = 'Y';
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), "byte offset 0", "magic \"MMIDIDY\\x00\\x00\""});
}

TEST(MegatronErrors, BadVersion) {
  Damaged d;
  d.idx[9] = 2;
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); }, {d.idx_name(), "byte offset 9", "version 2"});
}

TEST(MegatronErrors, UnknownDtypeCode) {
  Damaged d;
  d.idx[17] = 9;
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); }, {d.idx_name(), "byte offset 17", "dtype code 9"});
}

TEST(MegatronErrors, IdxSizeDisagreesWithHeader) {
  Damaged d;
  const std::size_t size = d.idx.size();
  d.idx += "xx";
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), std::to_string(size + 2) + " bytes", "needs " + std::to_string(size) + " bytes"});
}

TEST(MegatronErrors, TruncatedIdxHeader) {
  Damaged d;
  d.idx.resize(20);
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); }, {d.idx_name(), "20 bytes", "34-byte"});
}

TEST(MegatronErrors, SequencePastTheEndOfBin) {
  Damaged d;
  const std::size_t size = d.bin.size();
  d.bin.resize(size - 2);   // the last sequence (2 uint16 tokens) loses one
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), "byte offset " + std::to_string(kPointers + 8 * 10), "sequence 10",
                    "2 tokens of 2 bytes from byte " + std::to_string(size - 4), "runs past the end of", d.bin_name(),
                    std::to_string(size - 2) + " bytes"});
}

TEST(MegatronErrors, HugeCountsAreNamedWithoutWrappedArithmetic) {
  // issue 15 item 9: a length near 2^63 made "ends at byte -9223372036854775808", and a sequence count near 2^64
  // a wrapped byte count; the messages now say what the file declares and what it holds.
  Damaged d;
  for (int i = 0; i < 4; ++i) d.idx[34 + 4 * 0 + i] = static_cast<char>(0xff);   // sequence 0: length -1 as int32
  d.idx[34 + 3] = 0x7f;                                                           // 2^31 - 1 tokens
  auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {"sequence 0", "2147483647 tokens of 2 bytes from byte 0", "runs past the end of"});
  Damaged e;
  for (int i = 0; i < 8; ++i) e.idx[18 + i] = static_cast<char>(0xff);   // the sequence count: 2^64 - 1
  path = e.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {"declares 18446744073709551615 sequences", "more than its"});
}

TEST(MegatronErrors, BinLargerThanDescribed) {
  Damaged d;
  const std::size_t size = d.bin.size();
  d.bin += "abcd";
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), "describes " + std::to_string(size) + " bytes", d.bin_name(),
                    "has " + std::to_string(size + 4) + " bytes"});
}

TEST(MegatronErrors, PointerNotATokenBoundary) {
  Damaged d;
  d.idx[kPointers + 8 * 2] += 1;
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), "byte offset " + std::to_string(kPointers + 16), "sequence 2", "2-byte uint16"});
}

TEST(MegatronErrors, DocumentIndexOutOfOrder) {
  Damaged d;
  d.idx[kDocIndex + 8 * 2] = 0;   // document index 2 becomes 0 (< index 1 = 1)
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), "byte offset " + std::to_string(kDocIndex + 16), "document index 2"});
}

TEST(MegatronErrors, DocumentIndexNotEndingAtSequenceCount) {
  Damaged d;
  d.idx[d.idx.size() - 8] = 10;
  const auto path = d.save();
  expect_bad_input([&] { scan(path, ReaderOptions{}); },
                   {d.idx_name(), "the last is 10, expected the sequence count 11"});
}

TEST(MegatronErrors, BadTokenIds) {
  TempDir dir;
  write_megatron<std::int32_t>(dir / "neg", 4, {{{5, 6, -3, 7}}});
  expect_bad_input([&] { scan(dir / "neg", ReaderOptions{}); },
                   {(dir / "neg.bin").string(), "byte offset 8", "token id -3 is negative", "int32"});
  write_megatron<float>(dir / "frac", 7, {{{1, 2}}});
  std::string bin = read_file(dir / "frac.bin");
  const float half = 2.5f;
  std::memcpy(bin.data() + 4, &half, 4);
  write_file(dir / "frac.bin", bin);
  expect_bad_input([&] { scan(dir / "frac", ReaderOptions{}); },
                   {(dir / "frac.bin").string(), "byte offset 4", "token id 2.5 is not an integer"});
  write_megatron<std::int64_t>(dir / "big", 5, {{{1, 2}}, {{3}}});
  bin = read_file(dir / "big.bin");
  const std::int64_t huge = std::int64_t{1} << 40;
  std::memcpy(bin.data() + 16, &huge, 8);
  write_file(dir / "big.bin", bin);
  expect_bad_input([&] { scan(dir / "big", ReaderOptions{}); },
                   {(dir / "big.bin").string(), "byte offset 16", "does not fit int32"});
  ReaderOptions vocab;
  vocab.vocab_size = 100;
  write_megatron<std::uint16_t>(dir / "v", 8, {{{1, 2, 99}}, {{100}}});
  expect_bad_input([&] { scan(dir / "v", vocab); },
                   {(dir / "v.bin").string(), "byte offset 6", "token id 100 is >= the vocabulary size 100"});
}

TEST(MegatronErrors, MissingBin) {
  TempDir dir;
  write_megatron<std::uint16_t>(dir / "m", 8, {{{1}}});
  std::filesystem::remove(dir / "m.bin");
  ReaderOptions o;
  o.format = Format::kMegatron;
  expect_bad_input([&] { scan(dir / "m.idx", o); }, {(dir / "m.bin").string(), "cannot open"});
}

}  // namespace
}  // namespace ulysses::pack::testing

// Headerless flat token files (uint16 and uint32): split at the EOS after or before it, or one
// document; a missing token size or a size that is not a whole number of tokens is a BadInput.
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace ulysses::pack::testing {
namespace {

constexpr std::int32_t kEot = 29999;   // make_doc(..., kEot) ids stay below it

template <class T>
std::string flat_bytes(const Doc& tokens) {
  std::string out;
  for (const std::int32_t t : tokens) put(out, static_cast<T>(t));
  return out;
}

// Documents that end with the EOT (nanoGPT), consecutive EOTs and a tail without one.
Doc stream_with_eots() {
  Doc s;
  for (const Doc& d : {make_doc(0, 3, kEot), Doc{}, make_doc(1, 700, kEot), make_doc(2, 1, kEot)}) {
    s.insert(s.end(), d.begin(), d.end());
    s.push_back(kEot);
  }
  const Doc tail = make_doc(3, 4, kEot);
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

std::vector<Doc> split(const Doc& stream, SplitAt at) {
  std::vector<Doc> docs(1);
  for (const std::int32_t t : stream) {
    if (t == kEot && at == SplitAt::kBeforeEos && !docs.back().empty()) docs.emplace_back();
    docs.back().push_back(t);
    if (t == kEot && at == SplitAt::kAfterEos) docs.emplace_back();
  }
  if (docs.back().empty()) docs.pop_back();
  return docs;
}

ReaderOptions flat_options(int bytes, std::int64_t eos, SplitAt at = SplitAt::kAfterEos) {
  ReaderOptions o;
  o.format = Format::kFlat;
  o.flat_token_bytes = bytes;
  o.eos_id = eos;
  o.split_at = at;
  return o;
}

TEST(Flat, Uint16AndUint32InBothSplitModes) {
  TempDir dir;
  const Doc stream = stream_with_eots();
  write_file(dir / "u16.bin", flat_bytes<std::uint16_t>(stream));
  write_file(dir / "u32.bin", flat_bytes<std::uint32_t>(stream));
  for (const auto& [name, bytes] : {std::pair{"u16.bin", 2}, std::pair{"u32.bin", 4}}) {
    for (const SplitAt at : {SplitAt::kAfterEos, SplitAt::kBeforeEos}) {
      SCOPED_TRACE(std::string(name) + (at == SplitAt::kAfterEos ? " after" : " before"));
      const Scanned s = scan(dir / name, flat_options(bytes, kEot, at));
      EXPECT_EQ(read_all(s).ids, split(stream, at));
      EXPECT_EQ(s.stats.tokens, stream.size());
      EXPECT_EQ(s.stats.max_id, kEot);
    }
  }
}

TEST(Flat, WithoutEosTheFileIsOneDocument) {
  TempDir dir;
  const Doc stream = stream_with_eots();
  write_file(dir / "one.bin", flat_bytes<std::uint16_t>(stream));
  const Scanned s = scan(dir / "one.bin", flat_options(2, -1));
  ASSERT_EQ(s.docs.size(), 1u);
  EXPECT_EQ(read_all(s).ids[0], stream);
}

TEST(Flat, EosAtTheEdges) {
  TempDir dir;
  const Doc stream = {kEot, 5, kEot, kEot, 6, 7, kEot};
  write_file(dir / "e.bin", flat_bytes<std::uint16_t>(stream));
  EXPECT_EQ(read_all(scan(dir / "e.bin", flat_options(2, kEot, SplitAt::kAfterEos))).ids,
            (std::vector<Doc>{{kEot}, {5, kEot}, {kEot}, {6, 7, kEot}}));
  EXPECT_EQ(read_all(scan(dir / "e.bin", flat_options(2, kEot, SplitAt::kBeforeEos))).ids,
            (std::vector<Doc>{{kEot, 5}, {kEot}, {kEot, 6, 7}, {kEot}}));
}

// More than one 1 MiB scan block, with documents across block edges; reads from several threads.
TEST(Flat, LargeFileAcrossScanBlocks) {
  TempDir dir;
  Doc stream(1500000);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = i % 997 == 996 ? kEot : static_cast<std::int32_t>(i % 29000);
  write_file(dir / "big.bin", flat_bytes<std::uint16_t>(stream));
  const Scanned s = scan(dir / "big.bin", flat_options(2, kEot));
  const std::vector<Doc> expected = split(stream, SplitAt::kAfterEos);
  ASSERT_EQ(s.docs.size(), expected.size());
  std::vector<int> wrong(3, 0);
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      for (std::size_t d = w; d < s.docs.size(); d += 3) {
        Doc ids(s.docs[d].length);
        s.source->read(s.docs[d].offset, s.docs[d].length, ids.data(), nullptr);
        wrong[w] += ids != expected[d];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(3, 0));
}

TEST(FlatErrors, TokenSizeMissing) {
  TempDir dir;
  write_file(dir / "f.bin", flat_bytes<std::uint16_t>({1, 2}));
  expect_bad_input([&] { scan(dir / "f.bin", flat_options(0, -1)); },
                   {(dir / "f.bin").string(), "got 0", "--format flat --flat-dtype uint16|uint32"});
}

TEST(FlatErrors, SizeNotAWholeNumberOfTokens) {
  TempDir dir;
  write_file(dir / "odd.bin", flat_bytes<std::uint16_t>({1, 2, 3}) + "x");
  expect_bad_input([&] { scan(dir / "odd.bin", flat_options(4, -1)); },
                   {(dir / "odd.bin").string(), "7 bytes", "4-byte tokens", "3 bytes left over"});
}

TEST(FlatErrors, EosThatCannotOccur) {
  TempDir dir;
  write_file(dir / "f.bin", flat_bytes<std::uint16_t>({1, 2}));
  expect_bad_input([&] { scan(dir / "f.bin", flat_options(2, 70000)); },
                   {(dir / "f.bin").string(), "EOS id 70000", "uint16", "65535"});
}

TEST(FlatErrors, TokenIdsAreChecked) {
  TempDir dir;
  write_file(dir / "v.bin", flat_bytes<std::uint32_t>({1, 2, 3, 500}));
  ReaderOptions o = flat_options(4, -1);
  o.vocab_size = 500;
  expect_bad_input([&] { scan(dir / "v.bin", o); },
                   {(dir / "v.bin").string(), "byte offset 12", "token id 500 is >= the vocabulary size 500"});
}

}  // namespace
}  // namespace ulysses::pack::testing

// llm.c token shards: GPT-2 (v1, uint16) and Llama 3 (v7, uint32) files split into documents at the
// prepended EOT by default; header and size problems are BadInputs with both sizes.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace ulysses::pack::testing {
namespace {

constexpr std::int32_t kGpt2Eot = 50256;
constexpr std::int32_t kLlama3Bot = 128000;

template <class T>
std::string llmc_bytes(std::int32_t magic, std::int32_t version, const Doc& tokens) {
  std::string out;
  put(out, magic);
  put(out, version);
  put(out, static_cast<std::int32_t>(tokens.size()));
  out.append(253 * 4, '\0');
  for (const std::int32_t t : tokens) put(out, static_cast<T>(t));
  return out;
}

// As llm.c's fineweb.py writes a shard: a tail of a document begun in the previous shard, then
// documents each starting with the EOT.
struct Shard {
  Doc tokens;
  std::vector<Doc> before_eos;   // documents under kBeforeEos (the default)
  std::vector<Doc> after_eos;    // documents under kAfterEos
};

Shard make_shard(std::int32_t eot) {
  constexpr int kModulus = 20000;   // ids below every EOT used here
  const std::vector<Doc> docs = {make_doc(0, 3, kModulus), make_doc(1, 5, kModulus), make_doc(2, 0, kModulus),
                                 make_doc(3, 1200, kModulus), make_doc(4, 2, kModulus)};
  Shard s;
  s.tokens = make_doc(9, 4, kModulus);   // the tail from the previous shard
  s.before_eos.push_back(s.tokens);
  for (const Doc& d : docs) {
    Doc with_eot = {eot};
    with_eot.insert(with_eot.end(), d.begin(), d.end());
    s.before_eos.push_back(with_eot);
    s.tokens.insert(s.tokens.end(), with_eot.begin(), with_eot.end());
  }
  // kAfterEos: each EOT closes the text before it.
  Doc current;
  for (const std::int32_t t : s.tokens) {
    current.push_back(t);
    if (t == eot) s.after_eos.push_back(std::exchange(current, {}));
  }
  s.after_eos.push_back(current);
  return s;
}

TEST(Llmc, Gpt2ShardSplitsBeforeEachEot) {
  TempDir dir;
  const Shard shard = make_shard(kGpt2Eot);
  write_file(dir / "fineweb_train_000001.bin", llmc_bytes<std::uint16_t>(20240520, 1, shard.tokens));
  const Scanned s = scan(dir / "fineweb_train_000001.bin", ReaderOptions{}, 2);
  EXPECT_EQ(read_all(s).ids, shard.before_eos);
  EXPECT_EQ(s.stats.tokens, shard.tokens.size());
  EXPECT_EQ(s.stats.max_id, kGpt2Eot);
  EXPECT_EQ(s.stats.input_bytes, 1024 + 2 * shard.tokens.size());
  EXPECT_EQ(s.docs.front().offset, 0u);
}

TEST(Llmc, Llama3ShardSplitsBeforeEachBeginOfText) {
  TempDir dir;
  const Shard shard = make_shard(kLlama3Bot);
  write_file(dir / "l3.bin", llmc_bytes<std::uint32_t>(20240801, 7, shard.tokens));
  const Scanned s = scan(dir / "l3.bin", ReaderOptions{});
  EXPECT_EQ(read_all(s).ids, shard.before_eos);
  EXPECT_EQ(s.stats.max_id, kLlama3Bot);
}

TEST(Llmc, SplitAtAndEosCanBeGiven) {
  TempDir dir;
  const Shard shard = make_shard(kGpt2Eot);
  write_file(dir / "s.bin", llmc_bytes<std::uint16_t>(20240520, 1, shard.tokens));
  ReaderOptions after;
  after.split_at = SplitAt::kAfterEos;
  after.split_at_given = true;
  EXPECT_EQ(read_all(scan(dir / "s.bin", after)).ids, shard.after_eos);

  const Shard other = make_shard(25000);   // 25000 plays the EOT
  write_file(dir / "o.bin", llmc_bytes<std::uint16_t>(20240520, 1, other.tokens));
  ReaderOptions eos;
  eos.eos_id = 25000;
  EXPECT_EQ(read_all(scan(dir / "o.bin", eos)).ids, other.before_eos);
}

TEST(LlmcErrors, Truncated) {
  TempDir dir;
  std::string bytes = llmc_bytes<std::uint16_t>(20240520, 1, make_doc(0, 100));
  bytes.resize(bytes.size() - 3);
  write_file(dir / "t.bin", bytes);
  expect_bad_input([&] { scan(dir / "t.bin", ReaderOptions{}); },
                   {(dir / "t.bin").string(), "1221 bytes", "100 uint16 tokens = 1224 bytes", "truncated"});
  write_file(dir / "h.bin", bytes.substr(0, 1000));
  ReaderOptions o;
  o.format = Format::kLlmc;
  expect_bad_input([&] { scan(dir / "h.bin", o); }, {(dir / "h.bin").string(), "1000 bytes", "1024-byte"});
}

TEST(LlmcErrors, ExtraBytes) {
  TempDir dir;
  write_file(dir / "x.bin", llmc_bytes<std::uint32_t>(20240801, 7, make_doc(0, 10)) + "zz");
  expect_bad_input([&] { scan(dir / "x.bin", ReaderOptions{}); },
                   {(dir / "x.bin").string(), "1066 bytes", "= 1064 bytes", "extra bytes"});
}

TEST(LlmcErrors, WrongVersionOrMagic) {
  TempDir dir;
  write_file(dir / "v.bin", llmc_bytes<std::uint16_t>(20240520, 2, make_doc(0, 10)));
  expect_bad_input([&] { scan(dir / "v.bin", ReaderOptions{}); },
                   {(dir / "v.bin").string(), "byte offset 4", "version 2", "expected 1"});
  write_file(dir / "m.bin", llmc_bytes<std::uint16_t>(12345, 1, make_doc(0, 10)));
  ReaderOptions o;
  o.format = Format::kLlmc;
  expect_bad_input([&] { scan(dir / "m.bin", o); },
                   {(dir / "m.bin").string(), "byte offset 0", "magic 12345", "--format"});
}

TEST(LlmcErrors, TokenIdsAreChecked) {
  TempDir dir;
  ReaderOptions o;
  o.vocab_size = 50257;
  write_file(dir / "v.bin", llmc_bytes<std::uint16_t>(20240520, 1, {kGpt2Eot, 5, 50257}));
  expect_bad_input([&] { scan(dir / "v.bin", o); },
                   {(dir / "v.bin").string(), "byte offset 1028", "token id 50257 is >= the vocabulary size 50257"});
  std::string big = llmc_bytes<std::uint32_t>(20240801, 7, {kLlama3Bot, 5, 6});
  const std::uint32_t huge = 3000000000u;
  std::memcpy(big.data() + 1024 + 8, &huge, 4);
  write_file(dir / "b.bin", big);
  expect_bad_input([&] { scan(dir / "b.bin", ReaderOptions{}); },
                   {(dir / "b.bin").string(), "byte offset 1032", "token id 3000000000 does not fit int32"});
}

}  // namespace
}  // namespace ulysses::pack::testing

// detect_format() by name, file pair and magic; scan_input honouring an explicit format, adding up
// statistics over inputs, and leaving docs and stats untouched when an input fails.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace ulysses::pack::testing {
namespace {

std::string llmc_header(std::int32_t magic, std::int32_t version, std::int32_t tokens) {
  std::string out;
  put(out, magic);
  put(out, version);
  put(out, tokens);
  out.append(253 * 4, '\0');
  return out;
}

TEST(DetectFormat, JsonlByName) {
  for (const char* name : {"a.jsonl", "dir/b.jsonl.gz", "c.jsonl.zst", "d.json"}) {
    EXPECT_EQ(detect_format(name), Format::kJsonl) << name;
  }
}

TEST(DetectFormat, MegatronPairByBinIdxOrPrefix) {
  TempDir dir;
  write_file(dir / "ds_text_document.bin", "");
  write_file(dir / "ds_text_document.idx", "");
  for (const char* given : {"ds_text_document", "ds_text_document.bin", "ds_text_document.idx"}) {
    EXPECT_EQ(detect_format(dir / given), Format::kMegatron) << given;
  }
}

TEST(DetectFormat, LlmcByMagic) {
  TempDir dir;
  write_file(dir / "gpt2.bin", llmc_header(20240520, 1, 0));
  write_file(dir / "llama3.bin", llmc_header(20240801, 7, 0));
  EXPECT_EQ(detect_format(dir / "gpt2.bin"), Format::kLlmc);
  EXPECT_EQ(detect_format(dir / "llama3.bin"), Format::kLlmc);
}

TEST(DetectFormat, UnknownInputsAskForFormat) {
  TempDir dir;
  write_file(dir / "train.bin", llmc_header(1234, 1, 0));
  expect_bad_input([&] { detect_format(dir / "train.bin"); },
                   {(dir / "train.bin").string(), "first int32 (1234)", "train.idx",
                    "--format jsonl|megatron|llmc|flat", "--flat-dtype uint16|uint32"});
  write_file(dir / "notes.dat", "hello");
  expect_bad_input([&] { detect_format(dir / "notes.dat"); },
                   {(dir / "notes.dat").string(), "--format jsonl|megatron|llmc|flat|text|parquet"});
  write_file(dir / "notes.txt", "hello");   // plain text: read with --tokenizer
  EXPECT_EQ(detect_format(dir / "notes.txt"), Format::kText);
  EXPECT_EQ(detect_format(dir / "train-00000-of-00004.parquet"), Format::kParquet);   // by name, even if absent
  write_file(dir / "half.idx", "");
  expect_bad_input([&] { detect_format(dir / "half"); },
                   {(dir / "half").string(), "no such file", "half.bin"});
}

TEST(ScanInput, ExplicitFormatWins) {
  TempDir dir;
  // An llm.c magic, read as a flat uint32 file because the user said so.
  write_file(dir / "t.bin", llmc_header(20240801, 7, 0));
  ReaderOptions o;
  o.format = Format::kFlat;
  o.flat_token_bytes = 4;
  o.vocab_size = 0;
  const Scanned s = scan(dir / "t.bin", o);
  ASSERT_EQ(s.docs.size(), 1u);
  EXPECT_EQ(s.docs[0].length, 256u);
  Doc first(3);
  s.source->read(0, 3, first.data(), nullptr);
  EXPECT_EQ(first, (Doc{20240801, 7, 0}));
}

TEST(ScanInput, StatsAddUpOverInputsAndFailuresChangeNothing) {
  TempDir dir;
  std::string a, b;
  for (const std::uint16_t t : {1, 2, 3}) put(a, t);
  for (const std::uint16_t t : {9, 8}) put(b, t);
  write_file(dir / "a.bin", a);
  write_file(dir / "b.bin", b);
  write_file(dir / "bad.bin", a + "x");
  ReaderOptions o;
  o.format = Format::kFlat;
  o.flat_token_bytes = 2;
  std::vector<DocRef> docs;
  ScanStats stats;
  const auto sa = scan_input(dir / "a.bin", 0, o, docs, stats);
  const auto sb = scan_input(dir / "b.bin", 1, o, docs, stats);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[1].source, 1u);
  EXPECT_EQ(stats.documents, 2u);
  EXPECT_EQ(stats.tokens, 5u);
  EXPECT_EQ(stats.max_id, 9);
  EXPECT_EQ(stats.input_bytes, 10u);
  EXPECT_THROW(scan_input(dir / "bad.bin", 2, o, docs, stats), BadInput);
  EXPECT_EQ(docs.size(), 2u);
  EXPECT_EQ(stats.documents, 2u);
  EXPECT_EQ(stats.input_bytes, 10u);
}

}  // namespace
}  // namespace ulysses::pack::testing

// JSONL inputs end to end: plain, gzip and zstd files, with and without a loss mask, read back
// exactly through the spilled token source; every bad line is a BadInput naming file:line:column,
// or is counted and skipped under --on-error skip.
#include <algorithm>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include "fixtures.hpp"

namespace ulysses::pack::testing {
namespace {

enum class Codec { kPlain, kGzip, kZstd };

std::string json_array(const std::vector<int>& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

std::uint8_t mask_value(int d, int t) { return (d + t) % 3 != 0 ? 1 : 0; }

// Lines with the ids and mask under varying key orders, among keys that must be skipped.
std::string jsonl_line(int d, const Doc& ids, bool with_mask) {
  std::vector<int> mask;
  for (std::size_t t = 0; t < ids.size(); ++t) mask.push_back(mask_value(d, static_cast<int>(t)));
  const std::string id_list = json_array(std::vector<int>(ids.begin(), ids.end()));
  const std::string mask_part = with_mask ? fmt::format(", \"loss_mask\": {}", json_array(mask)) : "";
  if (d % 2 == 0) {
    return fmt::format(R"({{"id": {}, "meta": {{"a": [1, 2.5e-3, true, null, "x\"y\u00e9"]}}, "input_ids": {}{}, "text": "caf\u00e9 {{]"}})",
                       d, id_list, mask_part);
  }
  return fmt::format("{{\"text\": \"line\\n\xC3\xA9\"{}, \"input_ids\": {}}}", mask_part, id_list);
}

void write_gzip(const std::filesystem::path& path, const std::string& data) {
  // Two gzip members, as `cat a.gz b.gz` makes.
  const std::size_t half = data.size() / 2;
  for (const auto& [mode, begin, size] : {std::tuple{"wb", std::size_t{0}, half},
                                          std::tuple{"ab", half, data.size() - half}}) {
    gzFile gz = gzopen(path.c_str(), mode);
    ASSERT_NE(gz, nullptr);
    ASSERT_EQ(gzwrite(gz, data.data() + begin, static_cast<unsigned>(size)), static_cast<int>(size));
    ASSERT_EQ(gzclose(gz), Z_OK);
  }
}

std::string zstd_frame(std::string_view data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error("ZSTD_compress failed");
  out.resize(n);
  return out;
}

// Two zstd frames, as `cat a.zst b.zst` makes.
void write_zstd(const std::filesystem::path& path, const std::string& data) {
  const std::string_view all(data);
  write_file(path, zstd_frame(all.substr(0, data.size() / 3)) + zstd_frame(all.substr(data.size() / 3)));
}

std::filesystem::path write_jsonl(const TempDir& dir, Codec codec, const std::string& data) {
  switch (codec) {
    case Codec::kPlain: write_file(dir / "in.jsonl", data); return dir / "in.jsonl";
    case Codec::kGzip: write_gzip(dir / "in.jsonl.gz", data); return dir / "in.jsonl.gz";
    case Codec::kZstd: write_zstd(dir / "in.jsonl.zst", data); return dir / "in.jsonl.zst";
  }
  return {};
}

ReaderOptions jsonl_options(const TempDir& dir, bool with_mask) {
  ReaderOptions o;
  o.scratch_dir = dir / "scratch";
  if (with_mask) o.mask_key = "loss_mask";
  return o;
}

class JsonlRoundTrip : public ::testing::TestWithParam<std::tuple<Codec, bool>> {};

TEST_P(JsonlRoundTrip, ReadsBackEveryDocumentExactly) {
  const auto [codec, with_mask] = GetParam();
  TempDir dir;
  const std::vector<int> lengths = {5, 1, 0, 300, 17, 2000, 3};
  std::string data;
  std::vector<Doc> expected;
  for (int d = 0; d < static_cast<int>(lengths.size()); ++d) {
    const Doc doc = make_doc(d, lengths[static_cast<std::size_t>(d)]);
    data += jsonl_line(d, doc, with_mask) + (d == 1 ? "\n\n  \t\n" : "\n");   // blank lines skipped
    if (!doc.empty()) expected.push_back(doc);
  }
  data.pop_back();   // no newline after the last line
  const auto path = write_jsonl(dir, codec, data);
  const Scanned s = scan(path, jsonl_options(dir, with_mask), 3);

  ASSERT_EQ(s.docs.size(), expected.size());
  EXPECT_EQ(s.source->has_loss_mask(), with_mask);
  EXPECT_EQ(s.source->name(), path.string());
  const ReadBack back = read_all(s);
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(s.docs[i].source, 3u);
    EXPECT_EQ(s.docs[i].offset, offset);
    offset += s.docs[i].length;
    EXPECT_EQ(back.ids[i], expected[i]);
  }
  // Masks: documents are 0, 1, 3, 4, 5, 6 (2 is empty).
  const std::vector<int> doc_numbers = {0, 1, 3, 4, 5, 6};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    for (std::size_t t = 0; t < expected[i].size(); ++t) {
      const std::uint8_t want = with_mask ? mask_value(doc_numbers[i], static_cast<int>(t)) : 1;
      ASSERT_EQ(back.masks[i][t], want) << "doc " << i << " token " << t;
    }
  }
  EXPECT_EQ(s.stats.documents, expected.size());
  EXPECT_EQ(s.stats.tokens, 5u + 1 + 300 + 17 + 2000 + 3);
  EXPECT_EQ(s.stats.empty_documents, 1u);
  EXPECT_EQ(s.stats.skipped_documents, 0u);
  std::int32_t max_id = 0;
  for (const Doc& doc : expected) max_id = std::max(max_id, *std::max_element(doc.begin(), doc.end()));
  EXPECT_EQ(s.stats.max_id, max_id);
  EXPECT_EQ(s.stats.input_bytes, std::filesystem::file_size(path));
}

INSTANTIATE_TEST_SUITE_P(Codecs, JsonlRoundTrip,
                         ::testing::Combine(::testing::Values(Codec::kPlain, Codec::kGzip, Codec::kZstd),
                                            ::testing::Bool()));

TEST(Jsonl, SpillFilesAreUnlinkedAndReadsAreThreadSafe) {
  TempDir dir;
  std::string data;
  for (int d = 0; d < 200; ++d) data += jsonl_line(d, make_doc(d, 50 + d), false) + "\n";
  write_file(dir / "in.jsonl", data);
  const Scanned s = scan(dir / "in.jsonl", jsonl_options(dir, false));
  EXPECT_TRUE(std::filesystem::is_empty(dir / "scratch"));
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (std::size_t d = static_cast<std::size_t>(w); d < s.docs.size(); d += 4) {
          Doc ids(s.docs[d].length);
          s.source->read(s.docs[d].offset, s.docs[d].length, ids.data(), nullptr);
          wrong[static_cast<std::size_t>(w)] += ids != make_doc(static_cast<int>(d), 50 + static_cast<int>(d));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST(Jsonl, LineLongerThanTheReadBuffer) {
  TempDir dir;
  const Doc big = make_doc(1, 900000);   // ~6 MB of text, more than the 4 MiB line buffer
  write_file(dir / "big.jsonl", jsonl_line(0, make_doc(0, 3), false) + "\n" + jsonl_line(1, big, false) + "\n" +
                                    jsonl_line(2, make_doc(2, 4), false) + "\n");
  const Scanned s = scan(dir / "big.jsonl", jsonl_options(dir, false));
  const ReadBack back = read_all(s);
  ASSERT_EQ(back.ids.size(), 3u);
  EXPECT_EQ(back.ids[0], make_doc(0, 3));
  EXPECT_EQ(back.ids[1], big);
  EXPECT_EQ(back.ids[2], make_doc(2, 4));
}

TEST(Jsonl, CustomTokensKey) {
  TempDir dir;
  write_file(dir / "k.jsonl", "{\"input_ids\": [1], \"tokens\": [4, 5, 6]}\n");
  ReaderOptions o = jsonl_options(dir, false);
  o.tokens_key = "tokens";
  const ReadBack back = read_all(scan(dir / "k.jsonl", o));
  ASSERT_EQ(back.ids.size(), 1u);
  EXPECT_EQ(back.ids[0], (Doc{4, 5, 6}));
}

// A file whose line `bad_line` (1-based) is `bad`, the others good.
std::filesystem::path file_with_bad_line(const TempDir& dir, const std::string& bad, int bad_line = 3) {
  std::string data;
  for (int line = 1; line <= 4; ++line) {
    data += line == bad_line ? bad : jsonl_line(line, make_doc(line, 4, 100), true);
    data += "\n";
  }
  write_file(dir / "bad.jsonl", data);
  return dir / "bad.jsonl";
}

struct BadLine {
  std::string line;
  std::string where;     // "bad.jsonl:3" or with ":column"
  std::string message;
};

TEST(Jsonl, EveryBadLineIsABadInputWithFileLineAndColumn) {
  const std::vector<BadLine> cases = {
      {R"({"input_ids": [1, 2}, "loss_mask": [1, 1]})", "bad.jsonl:3:20", "expected ',' or ']'"},
      {R"({"tokens": [1, 2], "loss_mask": [1, 1]})", "bad.jsonl:3:", "no \"input_ids\" key"},
      {R"({"input_ids": [1, 2.5], "loss_mask": [1, 1]})", "bad.jsonl:3:19", "token id 2.5 is not an integer"},
      {R"({"input_ids": "1 2", "loss_mask": [1, 1]})", "bad.jsonl:3:15", "must be an array of token ids"},
      {R"({"input_ids": [1, -2], "loss_mask": [1, 1]})", "bad.jsonl:3:19", "token id -2 is negative"},
      {R"({"input_ids": [1, 100], "loss_mask": [1, 1]})", "bad.jsonl:3:", "token id 100 (token 1 of the document) is >= the vocabulary size 100"},
      {R"({"input_ids": [1, 2], "loss_mask": [1]})", "bad.jsonl:3:", "loss mask \"loss_mask\" has 1 values but \"input_ids\" has 2"},
      {R"({"input_ids": [1, 2], "loss_mask": [1, 2]})", "bad.jsonl:3:40", "loss mask values must be 0 or 1, found 2"},
      {R"({"input_ids": [1, 2]})", "bad.jsonl:3:", "no \"loss_mask\" key"},
      {R"({"input_ids": [1], "loss_mask": [1]} trailing)", "bad.jsonl:3:38", "after the JSON object"},
  };
  for (const BadLine& c : cases) {
    SCOPED_TRACE(c.line);
    TempDir dir;
    const auto path = file_with_bad_line(dir, c.line);
    ReaderOptions o = jsonl_options(dir, true);
    o.vocab_size = 100;
    std::vector<DocRef> docs(2);   // a previous input's documents stay untouched
    ScanStats stats;
    expect_bad_input([&] { scan_input(path, 1, o, docs, stats); },
                     {path.string() + ":3", c.where, c.message, "HINT", "--on-error skip"});
    EXPECT_EQ(docs.size(), 2u);
    EXPECT_EQ(stats.documents, 0u);
  }
}

TEST(Jsonl, SkipModeCountsBadLinesAndKeepsTheRest) {
  TempDir dir;
  const Doc good0 = make_doc(0, 6), good1 = make_doc(1, 9);
  write_file(dir / "s.jsonl", jsonl_line(0, good0, false) + "\n" + "{\"input_ids\": [1,\n" +
                                  "not json\n" + jsonl_line(1, good1, false) + "\n" +
                                  "{\"input_ids\": [-1]}\n");
  ReaderOptions o = jsonl_options(dir, false);
  o.on_error = OnError::kSkip;
  const Scanned s = scan(dir / "s.jsonl", o);
  EXPECT_EQ(s.stats.skipped_documents, 3u);
  EXPECT_EQ(s.stats.documents, 2u);
  const ReadBack back = read_all(s);
  ASSERT_EQ(back.ids.size(), 2u);
  EXPECT_EQ(back.ids[0], good0);
  EXPECT_EQ(back.ids[1], good1);
}

TEST(Jsonl, UnreadableFile) {
  TempDir dir;
  ReaderOptions o = jsonl_options(dir, false);
  expect_bad_input([&] { scan(dir / "missing.jsonl", o); }, {"missing.jsonl", "cannot open"});
  std::filesystem::create_directory(dir / "folder.jsonl");
  expect_bad_input([&] { scan(dir / "folder.jsonl", o); }, {"folder.jsonl"});
}

TEST(Jsonl, TruncatedCompressedFiles) {
  TempDir dir;
  std::string data;
  for (int d = 0; d < 100; ++d) data += jsonl_line(d, make_doc(d, 40), false) + "\n";
  write_gzip(dir / "t.jsonl.gz", data);
  std::string gz = read_file(dir / "t.jsonl.gz");
  write_file(dir / "t.jsonl.gz", std::string_view(gz).substr(0, gz.size() - 30));
  write_file(dir / "t.jsonl.zst", std::string_view(zstd_frame(data)).substr(0, 200));
  const ReaderOptions o = jsonl_options(dir, false);
  expect_bad_input([&] { scan(dir / "t.jsonl.gz", o); }, {"t.jsonl.gz", "gzip"});
  expect_bad_input([&] { scan(dir / "t.jsonl.zst", o); }, {"t.jsonl.zst", "truncated zstd"});
  write_file(dir / "c.jsonl.zst", "this is not zstd data at all");
  expect_bad_input([&] { scan(dir / "c.jsonl.zst", o); }, {"c.jsonl.zst", "corrupt zstd"});
}

TEST(Jsonl, EmptyFilesHaveNoDocuments) {
  TempDir dir;
  write_file(dir / "e.jsonl", "");
  write_file(dir / "e.jsonl.zst", "");
  write_gzip(dir / "e.jsonl.gz", "");
  for (const char* name : {"e.jsonl", "e.jsonl.zst", "e.jsonl.gz"}) {
    const Scanned s = scan(dir / name, jsonl_options(dir, true));
    EXPECT_TRUE(s.docs.empty()) << name;
    EXPECT_EQ(s.stats.max_id, -1) << name;
  }
}

TEST(Jsonl, TokensKeyMustDifferFromMaskKey) {
  TempDir dir;
  write_file(dir / "x.jsonl", "{\"input_ids\": [1]}\n");
  ReaderOptions o = jsonl_options(dir, false);
  o.mask_key = "input_ids";
  expect_bad_input([&] { scan(dir / "x.jsonl", o); }, {"x.jsonl", "--tokens-key", "--loss-mask-key"});
}

}  // namespace
}  // namespace ulysses::pack::testing

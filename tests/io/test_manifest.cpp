// manifest.json: every field survives a round trip (in memory and through a file); a missing field, a
// wrong type, a wrong format or version, bad JSON and a missing file are BadInput naming the field/file.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "io/manifest.hpp"

namespace fs = std::filesystem;
using namespace ulysses::shard;
using nlohmann::json;
using ulysses::BadInput;

namespace {

// Every field set to a value different from its default.
Manifest sample() {
  Manifest m;
  m.seq_len = 131072;
  m.sp = 8;
  m.alignment = 128;
  m.pad_id = 128004;
  m.vocab_size = 128256;
  m.max_token_id = 128255;
  m.has_loss_mask = true;
  m.policy = "bfd";
  m.seed = 18446744073709551615ull;   // the full uint64 range survives JSON
  m.command = "ulysses-pack --seq-len 131072 --sp 8 corpus.jsonl out/";
  m.created_by = "ulysses-pack 0.1.0";
  m.inputs = {{"corpus.jsonl", "jsonl", 123456, "0123456789abcdef", 1000, 2000000},
              {"more.bin", "megatron", 99, "fedcba9876543210", 3, 4}};
  m.shards = {{"shard-00000.h5", "train", 15, 7864320, "00000000000000aa"},
              {"shard-00001.h5", "train", 4, 2097152, "00000000000000bb"},
              {"valid-00000.h5", "valid", 1, 524288, "00000000000000cc"}};
  m.stats = {{"documents", 1000}, {"tokens", 2000000}, {"padding_fraction", 0.0125}};
  return m;
}

void expect_same(const Manifest& a, const Manifest& b) {
  EXPECT_EQ(a.format_version, b.format_version);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.sp, b.sp);
  EXPECT_EQ(a.alignment, b.alignment);
  EXPECT_EQ(a.pad_id, b.pad_id);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_token_id, b.max_token_id);
  EXPECT_EQ(a.has_loss_mask, b.has_loss_mask);
  EXPECT_EQ(a.policy, b.policy);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.command, b.command);
  EXPECT_EQ(a.created_by, b.created_by);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].path, b.inputs[i].path);
    EXPECT_EQ(a.inputs[i].format, b.inputs[i].format);
    EXPECT_EQ(a.inputs[i].bytes, b.inputs[i].bytes);
    EXPECT_EQ(a.inputs[i].xxh3, b.inputs[i].xxh3);
    EXPECT_EQ(a.inputs[i].documents, b.inputs[i].documents);
    EXPECT_EQ(a.inputs[i].tokens, b.inputs[i].tokens);
  }
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (std::size_t i = 0; i < a.shards.size(); ++i) {
    EXPECT_EQ(a.shards[i].file, b.shards[i].file);
    EXPECT_EQ(a.shards[i].split, b.shards[i].split);
    EXPECT_EQ(a.shards[i].num_sequences, b.shards[i].num_sequences);
    EXPECT_EQ(a.shards[i].bytes, b.shards[i].bytes);
    EXPECT_EQ(a.shards[i].xxh3, b.shards[i].xxh3);
  }
  EXPECT_EQ(a.stats, b.stats);
}

// The BadInput message of parsing j ("" and a failure if it parses).
std::string parse_error(const json& j) {
  try {
    manifest_from_json(j, "test.json");
  } catch (const BadInput& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed without error: " << j.dump();
  return "";
}

class ManifestFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("uly-manifest-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

}  // namespace

TEST(Manifest, RoundTripInMemory) {
  const Manifest m = sample();
  const json j = to_json(m);
  EXPECT_EQ(j.at("format"), "ulysses-packed");
  EXPECT_EQ(j.at("format_version"), 1);
  expect_same(manifest_from_json(j, "mem"), m);
}

TEST(Manifest, NumSequencesPerSplit) {
  EXPECT_EQ(sample().num_sequences("train"), 19);
  EXPECT_EQ(sample().num_sequences("valid"), 1);
  EXPECT_EQ(sample().num_sequences("test"), 0);
}

TEST(Manifest, EveryMissingTopLevelFieldIsNamed) {
  const json full = to_json(sample());
  EXPECT_EQ(full.size(), 16u);   // 15 struct fields + "format"
  for (const auto& [key, value] : full.items()) {
    json j = full;
    j.erase(key);
    EXPECT_NE(parse_error(j).find("test.json: field \"" + key + "\" is missing"), std::string::npos) << key;
  }
}

TEST(Manifest, EveryMissingNestedFieldIsNamed) {
  const json full = to_json(sample());
  for (const char* list : {"inputs", "shards"})
    for (const auto& [key, value] : full.at(list).at(1).items()) {
      json j = full;
      j[list][1].erase(key);
      const std::string want = std::string("test.json: ") + list + "[1]: field \"" + key + "\" is missing";
      EXPECT_NE(parse_error(j).find(want), std::string::npos) << want;
    }
}

TEST(Manifest, WrongTypesAndValues) {
  const json full = to_json(sample());
  struct Case {
    const char* pointer;
    json value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"/seq_len", "131072", "field \"seq_len\" is \"131072\", not an integer in range"},
      {"/has_loss_mask", 1, "field \"has_loss_mask\" is 1, not true or false"},
      {"/seed", -1, "field \"seed\" is -1, not an integer in range"},
      {"/pad_id", 1.5, "field \"pad_id\" is 1.5, not an integer in range"},
      {"/seq_len", 2.6666666666666668e+26, "field \"seq_len\" is 2.6666666666666668e+26, not an integer"},   // was UB
      {"/stats", json::array(), "field \"stats\" must be a JSON object"},
      {"/shards", json::object(), "field \"shards\" must be a JSON array"},
      {"/shards/0/split", "test", "shards[0]: split is \"test\""},
      {"/format", "something-else", "format is \"something-else\""},
      {"/format_version", 2, "format_version is 2; this reader reads version 1"},
      {"/sp", 3, "seq_len (131072) must be a positive multiple of sp (3) × alignment (128)"},
  };
  for (const Case& c : cases) {
    json j = full;
    j[json::json_pointer(c.pointer)] = c.value;
    EXPECT_NE(parse_error(j).find(c.message), std::string::npos) << c.pointer;
  }
  EXPECT_NE(parse_error(json::array()).find("must be a JSON object"), std::string::npos);
}

TEST_F(ManifestFile, RoundTripThroughPrettyFile) {
  write_manifest(sample(), dir / "manifest.json");
  std::stringstream text;
  text << std::ifstream(dir / "manifest.json").rdbuf();
  EXPECT_NE(text.str().find("\n  \"format\": \"ulysses-packed\",\n"), std::string::npos) << text.str();
  expect_same(read_manifest(dir), sample());
}

TEST_F(ManifestFile, MissingFileAndBadJson) {
  try {
    read_manifest(dir);
    ADD_FAILURE() << "no error for a missing manifest";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "manifest.json").string()), std::string::npos) << e.what();
  }
  std::ofstream(dir / "manifest.json") << "{\"format\": \"ulysses-packed\", ";
  try {
    read_manifest(dir);
    ADD_FAILURE() << "no error for bad JSON";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

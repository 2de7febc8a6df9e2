// HfWeights on hand-made Hugging Face directories: a single model.safetensors, a sharded one with an index
// written here, and every inconsistency between index, shards and directory as a BadInput naming them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "st_test_util.hpp"

namespace fs = std::filesystem;
using namespace ulysses::st;
using ulysses::BadInput;

namespace {

const std::vector<Writer::Decl> kShard1 = {{"model.embed_tokens.weight", DType::kBF16, {16, 4}},
                                           {"model.norm.weight", DType::kF32, {4}}};
const std::vector<Writer::Decl> kShard2 = {{"lm_head.weight", DType::kBF16, {16, 4}},
                                           {"model.layers.0.mlp.up_proj.weight", DType::kF16, {8, 4}}};

// Expects a BadInput whose message contains every one of `parts`; returns it for further checks.
template <class F>
std::string expect_bad_input(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const BadInput& e) {
    const std::string msg = ulysses::one_line(e);
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no BadInput";
  return "";
}

constexpr const char* kFile1 = "model-00001-of-00002.safetensors";
constexpr const char* kFile2 = "model-00002-of-00002.safetensors";

class HfDir : public st_test::ScratchDir {
 protected:
  // Two shards and an index mapping each tensor to its shard, plus `extra` {tensor: shard} entries.
  void write_sharded(const std::map<std::string, std::string>& extra = {}) {
    st_test::write_test_file(root / kFile1, kShard1);
    st_test::write_test_file(root / kFile2, kShard2);
    nlohmann::json map(extra);
    for (const auto& d : kShard1) map[d.name] = kFile1;
    for (const auto& d : kShard2) map[d.name] = kFile2;
    const nlohmann::json index_json = {{"metadata", {{"total_size", 312}}}, {"weight_map", map}};
    st_test::write_bytes(index(), index_json.dump());
  }
  fs::path index() const { return root / "model.safetensors.index.json"; }
};

}  // namespace

TEST_F(HfDir, SingleFile) {
  st_test::write_test_file(root / "model.safetensors", kShard1);
  const HfWeights w(root);
  EXPECT_EQ(w.names(), (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  EXPECT_TRUE(w.contains("model.norm.weight"));
  EXPECT_FALSE(w.contains("lm_head.weight"));
  const TensorInfo& t = w.info("model.norm.weight");
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_EQ(t.shape, std::vector<std::int64_t>{4});
  std::vector<std::uint8_t> got(t.nbytes());
  w.read("model.norm.weight", got.data());
  EXPECT_EQ(got, st_test::test_bytes(DType::kF32, 4, 1));
}

TEST_F(HfDir, ShardedReadsEveryTensorFromItsShard) {
  write_sharded();
  const HfWeights w(root);
  EXPECT_EQ(w.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                 "model.layers.0.mlp.up_proj.weight", "model.norm.weight"}));
  for (const auto* shard : {&kShard1, &kShard2})
    for (std::size_t i = 0; i < shard->size(); ++i) {
      const Writer::Decl& d = (*shard)[i];
      SCOPED_TRACE(d.name);
      const TensorInfo& t = w.info(d.name);
      EXPECT_EQ(t.dtype, d.dtype);
      EXPECT_EQ(t.shape, d.shape);
      std::vector<std::uint8_t> got(t.nbytes());
      w.read(d.name, got.data());
      EXPECT_EQ(got, st_test::test_bytes(d.dtype, st_test::numel(d.shape), i));
    }
}

TEST_F(HfDir, SingleFileIsPreferredOverAnIndex) {   // as transformers does
  write_sharded();
  st_test::write_test_file(root / "model.safetensors", {{"only", DType::kU8, {1}}});
  EXPECT_EQ(HfWeights(root).names(), std::vector<std::string>{"only"});
}

TEST_F(HfDir, UnknownTensorNamesTheDirectory) {
  write_sharded();
  const HfWeights w(root);
  expect_bad_input([&] { w.info("model.layers.7.self_attn.q_proj.weight"); },
                   {"'model.layers.7.self_attn.q_proj.weight' not found", root.string(), "(4 tensors)"});
  std::uint8_t sink = 0;
  expect_bad_input([&] { w.read("nope", &sink); }, {"'nope'", root.string()});
}

TEST_F(HfDir, MissingShardNamesIndexAndShard) {
  write_sharded();
  fs::remove(root / kFile2);
  expect_bad_input([&] { HfWeights{root}; },
                   {index().string(), (root / kFile2).string(), "which is missing"});
}

TEST_F(HfDir, TensorMissingFromItsShard) {
  write_sharded({{"model.layers.1.mlp.up_proj.weight", kFile1}});
  expect_bad_input([&] { HfWeights{root}; },
                   {index().string(), "'model.layers.1.mlp.up_proj.weight'",
                    (root / kFile1).string(), "does not hold it (2 tensors there)"});
}

TEST_F(HfDir, NeitherFileGivesAHint) {
  const std::string msg = expect_bad_input([&] { HfWeights{root}; },
                                           {root.string(), "model.safetensors.index.json", "HINT: "});
  EXPECT_NE(msg.find("model.safetensors nor"), std::string::npos) << msg;
}

TEST_F(HfDir, NotADirectory) {
  expect_bad_input([&] { HfWeights{root / "absent"}; }, {(root / "absent").string(), "not a directory"});
}

TEST_F(HfDir, MalformedIndexes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"weight_map": )", "not valid JSON"},
      {R"({"metadata": {}})", "non-empty \"weight_map\""},
      {R"({"weight_map": {}})", "non-empty \"weight_map\""},
      {R"({"weight_map": {"w": 3}})", "weight_map entry 'w' must name a shard file in the same directory, got 3"},
      {R"({"weight_map": {"w": "../model.safetensors"}})", "got \"../model.safetensors\""},
      {R"({"weight_map": {"w": "/etc/passwd"}})", "got \"/etc/passwd\""},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    st_test::write_bytes(index(), text);
    expect_bad_input([&] { HfWeights{root}; }, {index().string(), expected});
  }
}

TEST_F(HfDir, CorruptShardIsABadInputNamingTheShard) {
  write_sharded();
  st_test::write_bytes(root / kFile1, "junk");
  expect_bad_input([&] { HfWeights{root}; }, {(root / kFile1).string(), "4 bytes"});
}

// The Reader against hand-crafted bytes: every malformed header is a BadInput whose one-line message
// names the file, the tensor and the numbers; the tolerated variations (space padding, gaps, trailing
// bytes, empty tensors) open fine.
#include <string>
#include <vector>

#include "core/error.hpp"
#include "st_test_util.hpp"

namespace fs = std::filesystem;
using ulysses::BadInput;
using ulysses::st::Reader;
using st_test::raw_file;

namespace {

struct Case {
  const char* label;
  std::string bytes;      // the whole file
  const char* expected;   // a substring of the message
};

// A header with one tensor "w" whose entry is `entry`.
std::string one(const std::string& entry) { return R"({"w": )" + entry + "}"; }

const std::vector<Case> kBadFiles = {
    {"empty file", "", "0 bytes, shorter than the 8-byte header length"},
    {"5-byte file", "\x01\x02\x03\x04\x05", "5 bytes, shorter than the 8-byte header length"},
    {"absurd header length", raw_file(200'000'000, "{}", 0), "header length 200000000 exceeds the 100000000-byte limit"},
    {"header past the end", raw_file(1000, "{}", 10), "header length 1000 runs past the end of the file (20 bytes)"},
    {"not JSON", raw_file(R"({"w": {"dtype")", 0), "header: not valid JSON"},
    {"binary garbage", raw_file("\xff\xfe\x00\x01", 0), "header: not valid JSON"},
    {"JSON array", raw_file("[1, 2]", 0), "header must be a JSON object, got [1,2]"},
    {"entry not an object", raw_file(one("3"), 0), "tensor 'w': entry must be an object"},
    {"dtype missing", raw_file(one(R"({"shape": [1], "data_offsets": [0, 4]})"), 4), "tensor 'w': \"dtype\" is missing"},
    {"shape missing", raw_file(one(R"({"dtype": "F32", "data_offsets": [0, 4]})"), 4), "tensor 'w': \"shape\" is missing"},
    {"offsets missing", raw_file(one(R"({"dtype": "F32", "shape": [1]})"), 4),
     "tensor 'w': \"data_offsets\" is missing"},
    {"dtype not a string", raw_file(one(R"({"dtype": 7, "shape": [1], "data_offsets": [0, 4]})"), 4),
     "tensor 'w': \"dtype\" must be a string, got 7"},
    {"shape not an array", raw_file(one(R"({"dtype": "F32", "shape": "1", "data_offsets": [0, 4]})"), 4),
     "tensor 'w': \"shape\" must be an array"},
    {"fractional dimension", raw_file(one(R"({"dtype": "F32", "shape": [2.5], "data_offsets": [0, 4]})"), 4),
     "tensor 'w': shape [2.5] must hold integers"},
    {"one offset", raw_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [4]})"), 4),
     "tensor 'w': \"data_offsets\" must be two non-negative integers, got [4]"},
    {"string offsets", raw_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]})"), 4),
     "\"data_offsets\" must be two non-negative integers"},
    {"negative offset", raw_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"), 4),
     "\"data_offsets\" must be two non-negative integers, got [-4,0]"},
    {"unknown dtype", raw_file(one(R"({"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]})"), 1),
     "tensor 'w': unknown dtype \"F8_E4M3\""},
    {"negative dimension", raw_file(one(R"({"dtype": "F32", "shape": [-2, 2], "data_offsets": [0, 16]})"), 16),
     "tensor 'w': negative dimension -2 in shape [-2,2]"},
    {"huge dimension", raw_file(one(R"({"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 1]})"), 1),
     "dimension 18446744073709551615 in shape"},
    {"begin after end", raw_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})"), 8),
     "tensor 'w': data_offsets [8, 4] have begin > end"},
    {"size mismatch", raw_file(one(R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]})"), 24),
     "tensor 'w': data_offsets [0, 20] span 20 bytes, but shape [2, 3] of F32 needs 24 (6 x 4 bytes)"},
    {"byte count overflow",
     raw_file(one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]})"), 0),
     "tensor 'w': shape [4294967296, 4294967296] of F32 overflows a 64-bit byte count"},
    {"past the data section", raw_file(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})"), 4),
     "tensor 'w' data_offsets [0, 8] run past the data section (4 bytes)"},
    {"overlap",
     raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
              R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
              12),
     "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
    {"metadata not an object", raw_file(R"({"__metadata__": ["x"]})", 0),
     "__metadata__ must be an object of strings, got [\"x\"]"},
    {"metadata value not a string", raw_file(R"({"__metadata__": {"step": 5}})", 0),
     "__metadata__ entry \"step\" must be a string, got 5"},
};

const std::vector<Case> kTolerated = {
    {"header padded with spaces", raw_file(one(R"({"dtype": "U8", "shape": [3], "data_offsets": [0, 3]})") + "     ", 3),
     ""},
    {"gap between tensors",
     raw_file(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
              R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}})",
              8),
     ""},
    {"bytes after the last tensor", raw_file(one(R"({"dtype": "U8", "shape": [2], "data_offsets": [0, 2]})"), 100), ""},
    {"empty tensor inside another",
     raw_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},)"
              R"( "e": {"dtype": "F32", "shape": [0, 7], "data_offsets": [4, 4]}})",
              8),
     ""},
};

}  // namespace

using BadFile = st_test::ScratchDir;

TEST_F(BadFile, EveryMalformedHeaderIsABadInputNamingTheFile) {
  for (const Case& c : kBadFiles) {
    SCOPED_TRACE(c.label);
    const fs::path file = root / "bad.safetensors";
    st_test::write_bytes(file, c.bytes);
    try {
      Reader r(file);
      ADD_FAILURE() << "accepted";
    } catch (const BadInput& e) {
      const std::string msg = ulysses::one_line(e);
      EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_FALSE(e.hint().empty()) << msg;
    }
  }
}

TEST_F(BadFile, ToleratedVariationsOpen) {
  for (const Case& c : kTolerated) {
    SCOPED_TRACE(c.label);
    const fs::path file = root / "ok.safetensors";
    st_test::write_bytes(file, c.bytes);
    const Reader r(file);
    for (const auto& t : r.tensors()) EXPECT_EQ(st_test::read_all(r, t), std::vector<std::uint8_t>(t.nbytes(), 0xAB));
  }
}

TEST_F(BadFile, MissingFileAndDirectoryAreBadInputs) {
  EXPECT_THROW(Reader(root / "absent.safetensors"), BadInput);
  EXPECT_THROW(Reader{root}, BadInput);
}

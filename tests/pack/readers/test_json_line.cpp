// The JSONL line parser: valid lines yield exactly their ids and mask; every kind of invalid line is
// rejected with the column of the problem and a message saying what it is.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pack/readers/json_line.hpp"

namespace ulysses::pack {
namespace {

TokenLine parse(const std::string& line, const std::string& mask_key = "") {
  TokenLine out;
  parse_token_line(line, "input_ids", mask_key, out);
  return out;
}

struct GoodCase {
  std::string line;
  std::vector<std::int32_t> ids;
};

TEST(JsonLine, AcceptsValidJsonAndExtractsIds) {
  const std::vector<GoodCase> cases = {
      {R"({"input_ids":[]})", {}},
      {R"({"input_ids":[7]})", {7}},
      {" {\t\"input_ids\" : [ 0 , 2147483647 ,12 ] }\r", {0, 2147483647, 12}},
      {R"({"a":{"b":[{},[],"",-0.5e+10,1E5,0,-0,3.25,true,false,null]},"input_ids":[1,2]})", {1, 2}},
      {R"({"s":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\uD800","input_ids":[3]})", {3}},
      {"{\"s\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\",\"input_ids\":[4]}", {4}},
      {R"({"x":NaN,"y":-Infinity,"z":[Infinity],"input_ids":[5]})", {5}},
      {R"({"input\u005fids":[6,6]})", {6, 6}},
      {R"({"input_ids_2":[9],"input_ids":[8],"iNput_ids":"no"})", {8}},
  };
  for (const GoodCase& c : cases) {
    SCOPED_TRACE(c.line);
    EXPECT_EQ(parse(c.line).ids, c.ids);
  }
}

TEST(JsonLine, ExtractsMaskUnderItsKey) {
  const TokenLine out = parse(R"({"mask":[1,0,1],"text":"x","input_ids":[10,11,12]})", "mask");
  EXPECT_EQ(out.ids, (std::vector<std::int32_t>{10, 11, 12}));
  EXPECT_EQ(out.mask, (std::vector<std::uint8_t>{1, 0, 1}));
}

TEST(JsonLine, ReusedOutputIsCleared) {
  TokenLine out;
  parse_token_line(R"({"input_ids":[1,2,3],"m":[1,1,1]})", "input_ids", "m", out);
  parse_token_line(R"({"input_ids":[4],"m":[0]})", "input_ids", "m", out);
  EXPECT_EQ(out.ids, (std::vector<std::int32_t>{4}));
  EXPECT_EQ(out.mask, (std::vector<std::uint8_t>{0}));
}

struct BadCase {
  std::string line;
  std::size_t column;   // 0: the line as a whole
  std::string message;
  std::string mask_key = "";
};

TEST(JsonLine, RejectsInvalidLinesWithColumn) {
  const std::string deep = "{\"a\":" + std::string(600, '[') + std::string(600, ']') + ",\"input_ids\":[]}";
  const std::vector<BadCase> cases = {
      {"", 1, "must be one JSON object, found the end of the line"},
      {"[1,2]", 1, "must be one JSON object, found '['"},
      {R"({"input_ids":[1,2])", 19, "expected ',' or '}'"},
      {R"({"input_ids":[1,2]} x)", 21, "after the JSON object"},
      {R"({"input_ids":[1,2]}{})", 20, "after the JSON object"},
      {R"({"input_ids":[1,]})", 17, "token ids must be integers, found ']'"},
      {R"({"input_ids":[01]})", 15, "leading zero"},
      {R"({"input_ids":[2, 1.5]})", 18, "token id 1.5 is not an integer"},
      {R"({"input_ids":[1e3]})", 15, "token id 1e3 is not an integer"},
      {R"({"input_ids":[-3]})", 15, "token id -3 is negative"},
      {R"({"input_ids":[2147483648]})", 15, "token id 2147483648 does not fit int32"},
      {R"({"input_ids":[99999999999999999999999]})", 15, "does not fit int32"},
      {R"({"input_ids":["1"]})", 15, "token ids must be integers, found '\"'"},
      {R"({"input_ids":{"a":1}})", 14, "\"input_ids\" must be an array of token ids"},
      {R"({"input_ids":null})", 14, "must be an array"},
      {R"({"a":tru,"input_ids":[]})", 6, "expected a value"},
      {R"({"a":nul})", 6, "expected a value"},
      {R"({"a":"x\qy","input_ids":[]})", 8, "invalid escape"},
      {R"({"a":"\u12G4","input_ids":[]})", 7, "invalid escape"},
      {"{\"a\":\"tab\there\",\"input_ids\":[]}", 10, "raw control character 0x09"},
      {"{\"a\":\"\xC3\x28\",\"input_ids\":[]}", 7, "invalid UTF-8 sequence"},
      {"{\"a\":\"\xC0\xAF\",\"input_ids\":[]}", 7, "invalid UTF-8 byte 0xc0"},
      {"{\"a\":\"\xED\xA0\x80\",\"input_ids\":[]}", 7, "invalid UTF-8 sequence"},
      {"{\"a\":\"\xF4\x90\x80\x80\",\"input_ids\":[]}", 7, "invalid UTF-8 sequence"},
      {"{\"a\":\"\xE2\x82\"}", 7, "invalid UTF-8 sequence"},
      {R"({"a":"abc)", 6, "unterminated string"},
      {R"({"a":1,,"input_ids":[]})", 8, "expected a key string"},
      {R"({"a" 1})", 6, "expected ':' after a key"},
      {R"({"a":1 "b":2})", 8, "expected ',' or '}'"},
      {R"({"a":[1 2]})", 9, "expected ',' or ']' in an array"},
      {R"({"a":-})", 6, "invalid number"},
      {R"({"a":1.})", 6, "invalid number"},
      {R"({"a":1e+})", 6, "invalid number"},
      {R"({"a":.5})", 6, "expected a value"},
      {R"({"a":+1})", 6, "expected a value"},
      {R"({"input_ids":[1],"input_ids":[2]})", 18, "appears twice"},
      {R"({"input\u005fids":[1],"input_ids":[2]})", 23, "appears twice"},
      {deep, 517, "nested deeper than 512"},
      {R"({"a":1})", 0, "no \"input_ids\" key"},
      {R"({"input_ids":[1,2],"m":[1]})", 0, "loss mask \"m\" has 1 values but \"input_ids\" has 2 token ids", "m"},
      {R"({"input_ids":[1],"m":[2]})", 23, "loss mask values must be 0 or 1, found 2", "m"},
      {R"({"input_ids":[1],"m":[1.0]})", 23, "found 1.0", "m"},
      {R"({"input_ids":[1],"m":[true]})", 23, "found true", "m"},
      {R"({"input_ids":[1],"m":[10]})", 23, "found 10", "m"},
      {R"({"input_ids":[1],"m":1})", 22, "must be an array of 0/1 values", "m"},
      {R"({"input_ids":[1]})", 0, "no \"m\" key (the loss mask)", "m"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.line);
    try {
      parse(c.line, c.mask_key);
      ADD_FAILURE() << "accepted";
    } catch (const JsonLineError& e) {
      EXPECT_EQ(e.column(), c.column) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ulysses::pack

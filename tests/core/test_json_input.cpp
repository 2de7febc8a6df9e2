// parse_json_input / read_json_file: every bad document is one BadInput naming its source, including the two
// that escaped as crashes or library text before (issue 15): nesting 200,000 deep (a stack overflow in
// nlohmann's recursive copy) and numbers no double holds (out_of_range.406).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/json_input.hpp"

namespace {

using ulysses::BadInput;

std::string refusal(const std::string& text) {
  try {
    ulysses::parse_json_input(text, "x.json", "the hint");
  } catch (const BadInput& e) {
    return ulysses::one_line(e);
  }
  return "accepted";
}

TEST(JsonInput, EveryBadDocumentIsOneLineNamingTheSource) {
  EXPECT_EQ(refusal("{\"a\": "), "x.json: not valid JSON (byte 7 of 6) — HINT: the hint");
  EXPECT_EQ(refusal("{\"a\": 1e999}").rfind("x.json: a number out of range (", 0), 0u) << refusal("{\"a\": 1e999}");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(refusal(deep), "x.json: JSON nested deeper than 64 levels — HINT: the hint");
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 200000; ++i) s += "{\"a\":";
    return s + "1" + std::string(200000, '}');
  }();
  EXPECT_EQ(refusal(deep_objects), "x.json: JSON nested deeper than 64 levels — HINT: the hint");
}

TEST(JsonInput, DepthUpToTheLimitAndKeyOrderAreKept) {
  const std::string ok = std::string(ulysses::kMaxJsonDepth, '[') + std::string(ulysses::kMaxJsonDepth, ']');
  EXPECT_EQ(refusal(ok), "accepted");
  const auto ordered = ulysses::parse_json_input<nlohmann::ordered_json>(R"({"z": 1, "a": 2})", "x", "h");
  EXPECT_EQ(ordered.dump(), R"({"z":1,"a":2})");
}

TEST(JsonInput, AFileThatCannotBeOpenedIsBadInput) {
  try {
    ulysses::read_json_file("/nonexistent/config.json", "pass a config.json");
    FAIL() << "accepted";
  } catch (const BadInput& e) {
    EXPECT_EQ(ulysses::one_line(e), "cannot open /nonexistent/config.json — HINT: pass a config.json");
  }
}

}  // namespace

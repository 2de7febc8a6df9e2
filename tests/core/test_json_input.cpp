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

#include <fmt/format.h>

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

TEST(JsonInput, AFileThatCannotBeReadWhole) {
  auto refusal_of = [](const std::filesystem::path& path) {
    try {
      ulysses::read_json_file(path, "pass a config.json");
    } catch (const BadInput& e) {
      return ulysses::one_line(e);
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal_of("/nonexistent/config.json"),
            "cannot open JSON file /nonexistent/config.json: No such file or directory — HINT: check the path and its "
            "permissions");
  EXPECT_EQ(refusal_of("/dev/zero"), "JSON file /dev/zero is not a regular file (a FIFO, device or directory) — HINT: "
                                     "pass a regular file");   // it read without end
  EXPECT_NE(refusal_of("/tmp").find("is not a regular file"), std::string::npos);   // a directory
}

TEST(JsonInput, OrderedObjectsHaveAKeyLimit) {
  // ordered_json inserts by a linear scan: a million keys would take hours, so config.json (read ordered) has a cap
  std::string many = "{";
  for (int i = 0; i <= ulysses::kMaxOrderedKeys; ++i) many += fmt::format("{}\"k{}\": {}", i ? "," : "", i, i);
  many += "}";
  try {
    ulysses::parse_json_input<nlohmann::ordered_json>(many, "config.json", "h");
    ADD_FAILURE() << "accepted";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), "config.json: a JSON object with more than 10000 keys");
  }
  EXPECT_EQ(ulysses::parse_json_input(many, "x", "h").size(), 10001u);   // unordered: no limit needed
}

}  // namespace

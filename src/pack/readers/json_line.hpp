// A fast validating parser for one JSONL line: one JSON object whose top-level key `tokens_key` holds
// an array of token ids (and, optionally, `mask_key` a 0/1 loss mask of the same length).
//
// Guarantees: the whole line is validated as RFC 8259 JSON — strings (escapes, no raw control
// characters, well-formed UTF-8), numbers, true/false/null, nested objects and arrays (depth <= 512),
// nothing after the object but whitespace — except that, like Python's json module, the values NaN,
// Infinity and -Infinity are accepted where they are skipped. Keys are compared after unescaping.
// Token ids must be JSON integers in [0, 2^31); mask values must be 0 or 1. A top-level key that
// appears twice, a missing key, or a mask whose length differs from the ids is an error.
// Single pass, no allocation beyond the output vectors (their capacity is reused across lines).
// It does not check ids against a vocabulary: the caller does, with the line number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses::pack {

// A line that is not acceptable. column: 1-based byte in the line where the problem is, 0 when the
// problem is the line as a whole (a missing key).
class JsonLineError : public std::runtime_error {
 public:
  JsonLineError(std::size_t column, const std::string& what)
      : std::runtime_error(what), column_(column) {}
  std::size_t column() const { return column_; }

 private:
  std::size_t column_;
};

struct TokenLine {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;   // filled only when a mask key is given
};

// Throws JsonLineError. An empty mask_key means no mask is expected (out.mask is left empty).
void parse_token_line(std::string_view line, std::string_view tokens_key, std::string_view mask_key,
                      TokenLine& out);

}  // namespace ulysses::pack

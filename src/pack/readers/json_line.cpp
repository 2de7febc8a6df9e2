#include "pack/readers/json_line.hpp"

#include <algorithm>
#include <array>
#include <limits>

#include <fmt/format.h>

namespace ulysses::pack {
namespace {

constexpr int kMaxDepth = 512;

// Bytes inside a string: 0 plain, 1 closing quote, 2 backslash, 3 raw control character,
// 4 first byte of a multi-byte UTF-8 sequence (or an invalid byte).
constexpr std::array<std::uint8_t, 256> make_string_classes() {
  std::array<std::uint8_t, 256> c{};
  for (int i = 0; i < 0x20; ++i) c[i] = 3;
  c['"'] = 1;
  c['\\'] = 2;
  for (int i = 0x80; i < 0x100; ++i) c[i] = 4;
  return c;
}
constexpr std::array<std::uint8_t, 256> kStringClass = make_string_classes();

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::uint32_t hex4(std::string_view s) {
  std::uint32_t v = 0;
  for (char c : s.substr(0, 4)) {
    v = v * 16 + static_cast<std::uint32_t>(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

void append_utf8(std::string& s, std::uint32_t cp) {
  const auto byte = [&](std::uint32_t b) { s += static_cast<char>(b); };
  if (cp < 0x80) {
    byte(cp);
  } else if (cp < 0x800) {
    byte(0xC0 | (cp >> 6));
    byte(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    byte(0xE0 | (cp >> 12));
    byte(0x80 | ((cp >> 6) & 0x3F));
    byte(0x80 | (cp & 0x3F));
  } else {
    byte(0xF0 | (cp >> 18));
    byte(0x80 | ((cp >> 12) & 0x3F));
    byte(0x80 | ((cp >> 6) & 0x3F));
    byte(0x80 | (cp & 0x3F));
  }
}

// Decodes the body of a string already validated by the parser (a lone surrogate stays as is).
std::string unescape(std::string_view raw) {
  std::string s;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\') {
      s += raw[i];
      continue;
    }
    const char e = raw[++i];
    switch (e) {
      case 'b': s += '\b'; break;
      case 'f': s += '\f'; break;
      case 'n': s += '\n'; break;
      case 'r': s += '\r'; break;
      case 't': s += '\t'; break;
      case 'u': {
        std::uint32_t cp = hex4(raw.substr(i + 1));
        i += 4;
        const bool high = cp >= 0xD800 && cp <= 0xDBFF;
        if (high && raw.substr(i + 1, 2) == "\\u") {
          const std::uint32_t low = hex4(raw.substr(i + 3));
          if (low >= 0xDC00 && low <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
          }
        }
        append_utf8(s, cp);
        break;
      }
      default: s += e;   // '"', '\\', '/'
    }
  }
  return s;
}

class Parser {
 public:
  Parser(std::string_view line, std::string_view tokens_key, std::string_view mask_key)
      : begin_(line.data()), p_(line.data()), end_(line.data() + line.size()),
        tokens_key_(tokens_key), mask_key_(mask_key) {}

  void parse(TokenLine& out) {
    out.ids.clear();
    out.mask.clear();
    skip_ws();
    if (peek() != '{') fail(p_, fmt::format("a line must be one JSON object, {}", found()));
    object(1, &out);
    skip_ws();
    if (p_ != end_) fail(p_, fmt::format("unexpected {} after the JSON object", found()));
    if (!seen_ids_) throw JsonLineError(0, fmt::format("no \"{}\" key", tokens_key_));
    if (mask_key_.empty()) return;
    if (!seen_mask_) throw JsonLineError(0, fmt::format("no \"{}\" key (the loss mask)", mask_key_));
    if (out.mask.size() != out.ids.size()) {
      throw JsonLineError(0, fmt::format("loss mask \"{}\" has {} values but \"{}\" has {} token ids",
                                         mask_key_, out.mask.size(), tokens_key_, out.ids.size()));
    }
  }

 private:
  enum class Key { kTokens, kMask, kOther };

  [[noreturn]] void fail(const char* at, const std::string& what) const {
    throw JsonLineError(static_cast<std::size_t>(at - begin_) + 1, what);
  }
  char peek() const { return p_ < end_ ? *p_ : '\0'; }
  void skip_ws() {
    while (p_ < end_ && is_ws(*p_)) ++p_;
  }
  std::string found() const {
    if (p_ >= end_) return "found the end of the line";
    const auto c = static_cast<unsigned char>(*p_);
    if (c < 0x20 || c >= 0x7F) return fmt::format("found byte 0x{:02x}", c);
    return fmt::format("found '{}'", *p_);
  }

  // At an opening bracket: calls element() for each comma-separated element up to `close`.
  template <class F>
  void elements(char close, const char* what, F&& element) {
    ++p_;
    skip_ws();
    if (peek() == close) {
      ++p_;
      return;
    }
    for (;;) {
      element();
      skip_ws();
      if (peek() == ',') {
        ++p_;
        skip_ws();
      } else if (peek() == close) {
        ++p_;
        return;
      } else {
        fail(p_, fmt::format("expected ',' or '{}' in {}, {}", close, what, found()));
      }
    }
  }

  // An object; at the top level (out != nullptr) the token and mask keys are extracted.
  void object(int depth, TokenLine* out) {
    check_depth(depth);
    elements('}', "an object", [&] {
      const char* key_at = p_;
      const Key key = member_key(out != nullptr);
      skip_ws();
      if (peek() != ':') fail(p_, fmt::format("expected ':' after a key, {}", found()));
      ++p_;
      skip_ws();
      if (key == Key::kOther) return value(depth);
      bool& seen = key == Key::kTokens ? seen_ids_ : seen_mask_;
      if (seen) fail(key_at, "a token or mask key appears twice");
      seen = true;
      if (key == Key::kTokens) ids(out->ids);
      else mask(out->mask);
    });
  }

  Key member_key(bool top_level) {
    if (peek() != '"') fail(p_, fmt::format("expected a key string, {}", found()));
    ++p_;
    bool escaped = false;
    const std::string_view raw = string_body(escaped);
    if (!top_level) return Key::kOther;
    return escaped ? classify(unescape(raw)) : classify(raw);
  }

  Key classify(std::string_view key) const {
    if (key == tokens_key_) return Key::kTokens;
    if (!mask_key_.empty() && key == mask_key_) return Key::kMask;
    return Key::kOther;
  }

  void array(int depth) {
    check_depth(depth);
    elements(']', "an array", [&] { value(depth); });
  }

  void check_depth(int depth) const {
    if (depth > kMaxDepth) fail(p_, fmt::format("objects and arrays nested deeper than {}", kMaxDepth));
  }

  void value(int depth) {
    switch (peek()) {
      case '{': return object(depth + 1, nullptr);
      case '[': return array(depth + 1);
      case '"': {
        ++p_;
        bool escaped = false;
        string_body(escaped);
        return;
      }
      case 't': return word("true");
      case 'f': return word("false");
      case 'n': return word("null");
      case 'N': return word("NaN");
      case 'I': return word("Infinity");
      case '-':
        if (p_ + 1 < end_ && p_[1] == 'I') {
          ++p_;
          return word("Infinity");
        }
        return number();
      default:
        if (is_digit(peek())) return number();
        fail(p_, fmt::format("expected a value, {}", found()));
    }
  }

  void word(std::string_view w) {
    if (std::string_view(p_, static_cast<std::size_t>(end_ - p_)).substr(0, w.size()) != w) {
      fail(p_, fmt::format("expected a value, {}", found()));
    }
    p_ += w.size();
  }

  void digits(const char* start) {
    if (!is_digit(peek())) fail(start, "invalid number");
    while (is_digit(peek())) ++p_;
  }

  void number() {
    const char* start = p_;
    if (peek() == '-') ++p_;
    if (peek() == '0') {
      ++p_;
      if (is_digit(peek())) fail(start, "invalid number (leading zero)");
    } else {
      digits(start);
    }
    if (peek() == '.') {
      ++p_;
      digits(start);
    }
    if (peek() == 'e' || peek() == 'E') {
      ++p_;
      if (peek() == '+' || peek() == '-') ++p_;
      digits(start);
    }
  }

  // After the opening quote; returns the raw body and moves past the closing quote.
  std::string_view string_body(bool& escaped) {
    const char* start = p_;
    for (;;) {
      while (p_ < end_ && kStringClass[static_cast<unsigned char>(*p_)] == 0) ++p_;
      if (p_ == end_) fail(start - 1, "unterminated string");
      switch (kStringClass[static_cast<unsigned char>(*p_)]) {
        case 1: {
          const std::string_view body(start, static_cast<std::size_t>(p_ - start));
          ++p_;
          return body;
        }
        case 2:
          escaped = true;
          escape();
          break;
        case 3:
          fail(p_, fmt::format("raw control character 0x{:02x} in a string",
                               static_cast<unsigned char>(*p_)));
        default:
          utf8_sequence();
      }
    }
  }

  void escape() {
    const char e = p_ + 1 < end_ ? p_[1] : '\0';
    if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
      p_ += 2;
      return;
    }
    if (e == 'u' && end_ - p_ >= 6 && std::all_of(p_ + 2, p_ + 6, is_hex)) {
      p_ += 6;
      return;
    }
    fail(p_, "invalid escape sequence in a string");
  }

  // Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
  void utf8_sequence() {
    const auto byte = [&](std::ptrdiff_t i) -> unsigned {
      return p_ + i < end_ ? static_cast<unsigned char>(p_[i]) : 0u;
    };
    const unsigned lead = byte(0);
    unsigned lo = 0x80, hi = 0xBF;
    int length = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else {
      fail(p_, fmt::format("invalid UTF-8 byte 0x{:02x} in a string", lead));
    }
    bool ok = byte(1) >= lo && byte(1) <= hi;
    for (int i = 2; i < length; ++i) ok = ok && byte(i) >= 0x80 && byte(i) <= 0xBF;
    if (!ok) fail(p_, "invalid UTF-8 sequence in a string");
    p_ += length;
  }

  void ids(std::vector<std::int32_t>& out) {
    if (peek() != '[') {
      fail(p_, fmt::format("\"{}\" must be an array of token ids, {}", tokens_key_, found()));
    }
    elements(']', "the token ids", [&] { out.push_back(id()); });
  }

  std::int32_t id() {
    const char* start = p_;
    std::uint64_t v = 0;
    while (p_ < end_ && is_digit(*p_)) {
      v = v * 10 + static_cast<std::uint64_t>(*p_ - '0');
      ++p_;
    }
    const std::ptrdiff_t n = p_ - start;
    const bool fraction = p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E');
    if (n == 0 || n > 10 || (n > 1 && *start == '0') || fraction ||
        v > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
      bad_id(start);
    }
    return static_cast<std::int32_t>(v);
  }

  [[noreturn]] void bad_id(const char* start) {
    p_ = start;
    if (peek() != '-' && !is_digit(peek())) {
      fail(start, fmt::format("token ids must be integers, {}", found()));
    }
    number();
    const std::string_view text(start, static_cast<std::size_t>(p_ - start));
    if (text.find_first_of(".eE") != std::string_view::npos) {
      fail(start, fmt::format("token id {} is not an integer", text));
    }
    if (text[0] == '-') fail(start, fmt::format("token id {} is negative", text));
    fail(start, fmt::format("token id {} does not fit int32", text));
  }

  void mask(std::vector<std::uint8_t>& out) {
    if (peek() != '[') {
      fail(p_, fmt::format("loss mask \"{}\" must be an array of 0/1 values, {}", mask_key_, found()));
    }
    elements(']', "the loss mask", [&] {
      const char* at = p_;
      const char c = peek();
      const char next = p_ + 1 < end_ ? p_[1] : '\0';
      if ((c == '0' || c == '1') && !is_digit(next) && next != '.' && next != 'e' && next != 'E') {
        out.push_back(static_cast<std::uint8_t>(c - '0'));
        ++p_;
        return;
      }
      value(1);
      const auto shown = std::min<std::size_t>(static_cast<std::size_t>(p_ - at), 24);
      fail(at, fmt::format("loss mask values must be 0 or 1, found {}", std::string_view(at, shown)));
    });
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string_view tokens_key_, mask_key_;
  bool seen_ids_ = false, seen_mask_ = false;
};

}  // namespace

void parse_token_line(std::string_view line, std::string_view tokens_key, std::string_view mask_key,
                      TokenLine& out) {
  Parser(line, tokens_key, mask_key).parse(out);
}

}  // namespace ulysses::pack

#include "tokenize/regex_split.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "tokenize/text_error.hpp"

namespace ulysses::tokenize {

struct RegexSplit::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// One match-data block per thread (split() runs on the packer's worker threads), room for the whole match only:
// with capture groups in the pattern pcre2_match then returns 0, and the whole match is still in the first pair.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

RegexSplit::RegexSplit(const std::string& pattern, const std::string& file) : code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw BadInput(fmt::format("{}: the pre-tokenizer's regex does not compile at offset {}: {}", file, offset,
                               reinterpret_cast<const char*>(message)),
                   "use the model's own tokenizer.json; a pattern PCRE2 cannot read is not supported");
  }
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);   // without JIT (an unsupported CPU) it still matches
}

RegexSplit::~RegexSplit() = default;

void RegexSplit::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local const MatchData match;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0, gap = 0;   // where the next search starts; where the current unmatched stretch starts
  while (start < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {   // a match, depth, heap or JIT stack limit on this document
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw TextError(start, fmt::format("the pre-tokenizer's regex gave up at byte {}: {}", start,
                                         reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* at = pcre2_get_ovector_pointer(match.data);
    if (at[1] == at[0]) {   // an empty match: step over one character, as an unmatched one
      start = at[0] + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (at[0] > gap) out.push_back(text.substr(gap, at[0] - gap));
    out.push_back(text.substr(at[0], at[1] - at[0]));
    start = gap = at[1];
  }
  if (gap < text.size()) out.push_back(text.substr(gap));
}

}  // namespace ulysses::tokenize

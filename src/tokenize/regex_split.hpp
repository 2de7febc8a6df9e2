// A pre-tokenizer's regex split, as `tokenizers`' Split(pattern, behavior="isolated", invert=false): the text is cut
// into the regex's non-overlapping matches, left to right, and the stretches between them; each is one pre-token.
// PCRE2 with Unicode properties (\p{L}, \p{N}, \s as Unicode white space), JIT-compiled. Text must be valid UTF-8
// (the caller checks it once). compile once, split from any number of threads; a document beyond PCRE2's limits
// throws TextError.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses::tokenize {

class RegexSplit {
 public:
  // Throws BadInput naming `file` when PCRE2 cannot compile the pattern.
  RegexSplit(const std::string& pattern, const std::string& file);
  ~RegexSplit();
  RegexSplit(const RegexSplit&) = delete;
  RegexSplit& operator=(const RegexSplit&) = delete;

  // Appends the pre-tokens of text (views into it) to out.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace ulysses::tokenize

// TextError: a document the tokenizer cannot encode — not UTF-8, or beyond the pre-tokenizer regex's limits.
// `offset` is the byte of the text where it went wrong. The packer reports it with the document's file and line.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace ulysses::tokenize {

class TextError : public std::runtime_error {
 public:
  TextError(std::size_t offset, const std::string& what) : std::runtime_error(what), offset_(offset) {}
  std::size_t offset() const { return offset_; }

 private:
  std::size_t offset_;
};

}  // namespace ulysses::tokenize

// TextEncoder: what one kind of tokenizer file gives the Tokenizer facade (tokenizer.hpp) — text → ids, the ids the
// file puts around every document, and its tokens by name. Implementations: hf_tokenizer.hpp (tokenizer.json,
// byte-level BPE), tekken.hpp (Mistral's tekken.json), sentencepiece_model.hpp (tokenizer.model). encode() is const
// and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses::tokenize {

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  // Appends the ids of text (valid UTF-8; checked by the caller), without the document's template.
  virtual void encode(std::string_view text, std::vector<std::int32_t>& out) const = 0;
  virtual std::int64_t vocab_size() const = 0;                                       // the largest id + 1
  virtual std::optional<std::int32_t> token_id(const std::string& token) const = 0;  // a token's id, by its text
  virtual std::string token_text(std::int32_t id) const = 0;                          // "" when unknown
  virtual std::string kind() const = 0;                                               // "byte-level BPE", …
  // The end-of-document token the file itself names (sentencepiece's eos_id, Tekken's </s>), when the folder's
  // configs do not.
  virtual std::optional<std::int32_t> own_eos() const { return std::nullopt; }
  // The ids before and after every document (Llama 3's <|begin_of_text|>; Llama 2's <s> by add_bos_token).
  std::vector<std::int32_t> prefix, suffix;
};

}  // namespace ulysses::tokenize

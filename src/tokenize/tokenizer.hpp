// Tokenizer: a Hugging Face model folder's tokenizer → token ids, exactly as the reference library gives them:
//   tokenizer.json (byte-level BPE: Llama 3 / 3.1 / 3.2, Qwen2 / Qwen3, GPT-2; hf_tokenizer.hpp) — the ids of
//     `tokenizers`' `Tokenizer.from_file(...).encode(text).ids` (add_special_tokens=True), taken first when the folder
//     has several files, as transformers' AutoTokenizer does (a tokenizer.json this reader refuses — the byte-fallback
//     BPE of Llama 2 and Mistral — gives way to the folder's next file);
//   tekken.json (Mistral; tekken.hpp) — mistral-common's Tekkenizer.encode(text, bos=True);
//   tokenizer.model (SentencePiece: Llama 2, Mistral v1–v3; sentencepiece_model.hpp) — sentencepiece's
//     `encode(text)`, with the BOS/EOS that tokenizer_config.json's add_bos_token/add_eos_token ask for.
// The end-of-document token (appended by the packer) is tokenizer_config.json's eos_token, else
// generation_config.json's first eos_token_id, else the file's own. Torch-free; encode() is const and may run on many threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenize/text_error.hpp"

namespace ulysses::tokenize {

// The first byte of text that breaks UTF-8 (overlong forms, surrogates and code points above U+10FFFF included),
// or nullopt when it is valid.
std::optional<std::size_t> invalid_utf8_at(std::string_view text);

class Tokenizer {
 public:
  // `path`: a model folder holding tokenizer.json, or the file itself. The folder's tokenizer_config.json
  // (`eos_token`), else generation_config.json (`eos_token_id`), names the end-of-document token. Throws BadInput.
  static Tokenizer load(const std::filesystem::path& path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Appends the ids of one document to out: the post-processor's template around the text's tokens, or with
  // add_special_tokens false the text's tokens alone (as `encode(text, add_special_tokens=False)`). Throws
  // TextError for text that is not UTF-8, or that the pre-tokenizer's regex cannot match (PCRE2's limits).
  void encode(std::string_view text, std::vector<std::int32_t>& out, bool add_special_tokens = true) const;

  std::int64_t vocab_size() const;                 // the largest id + 1 (model vocabulary and added tokens)
  std::optional<std::int32_t> eos_id() const;      // the end-of-document token, when the folder names one
  const std::string& eos_token() const;            // its text ("" when none)
  const std::filesystem::path& file() const;       // the tokenizer.json read
  const std::string& file_hash() const;            // XXH3-64 hex of that file's bytes
  // One line for the log: what is added around each document as the packer runs it (its add_special_tokens and
  // append_eos), and the EOS the folder names.
  std::string describe(bool add_special_tokens, bool append_eos) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static std::unique_ptr<Impl> load_file(const std::filesystem::path& file, const std::filesystem::path& dir);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ulysses::tokenize

// Byte-level BPE, the model of Hugging Face `tokenizer.json` files with `"model": {"type": "BPE"}` and a ByteLevel
// pre-tokenizer (Llama 3 / 3.1 / 3.2, Qwen2 / Qwen3, GPT-2): one pre-token's bytes → token ids.
//
// Each byte is first a symbol of its own: the vocabulary entry of its byte-level character (GPT-2's
// bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 are shifted to U+0100…). Then the
// adjacent pair with the lowest merge rank is merged, leftmost first among equal ranks, until no adjacent pair has
// a merge — what `tokenizers`' Word::merge_all does (no dropout), and what tiktoken's byte_pair_merge does when a
// pair's rank is that of the token it makes. With ignore_merges (Llama 3, tiktoken), a pre-token that is a
// vocabulary entry as a whole is that entry, merges or not. Torch-free; encode() is const and thread-safe
// (its cache belongs to the caller).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ulysses::tokenize {

// The byte-level character of each byte, as UTF-8 ("Ġ" for ' ', "a" for 'a').
const std::vector<std::string>& byte_level_chars();

class BytePairEncoder {
 public:
  // vocab: token (byte-level characters) → id; merges: pairs of tokens in rank order, or — ranks given, one per
  // merge — ranked by ranks[i] (tiktoken: every split of a token into two tokens has that token's rank). Throws
  // BadInput (naming `file`) when a byte has no vocabulary entry or a merge's parts or result are not in the
  // vocabulary.
  BytePairEncoder(std::unordered_map<std::string, std::int32_t> vocab,
                  const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                  const std::string& file, const std::vector<std::int32_t>& ranks = {});

  // Appends the ids of one pre-token (raw bytes, not byte-level characters) to out.
  void encode(std::string_view bytes, std::vector<std::int32_t>& out) const;

  std::int32_t max_id() const { return max_id_; }
  const std::unordered_map<std::string, std::int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    std::int32_t rank, id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void merge_all(std::vector<std::int32_t>& symbols) const;

  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;   // (left id, right id) → rank, merged id
  std::int32_t byte_id_[256] = {};
  bool ignore_merges_ = false;
  std::int32_t max_id_ = -1;
};

}  // namespace ulysses::tokenize

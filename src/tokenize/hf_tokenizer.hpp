// A Hugging Face tokenizer.json with a byte-level BPE model (Llama 3 / 3.1 / 3.2, Qwen2 / Qwen3, GPT-2), encoding as
// `tokenizers` does, in its order:
//   1. added tokens (special or not) matched on the raw text (`"normalized": false`) are cut out, leftmost-longest
//      first; they are never split;
//   2. each stretch between them is normalized (none, or NFC), and the added tokens matched on normalized text are
//      cut out of it;
//   3. pre-tokenizers: Split(regex, "isolated") and ByteLevel (its GPT-2 regex when use_regex), in sequence;
//   4. byte-level BPE on each pre-token (bpe.hpp).
// The post-processor's template (Llama 3's <|begin_of_text|>; ByteLevel adds nothing) becomes the encoder's
// prefix/suffix. Anything else in the file (another model type, normalizer or pre-tokenizer, added tokens that strip
// spaces or must be single words, byte fallback) is refused with one line naming the file and the field. The file's
// "truncation" and "padding" are ignored: a document is never cut by the tokenizer.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenize/text_encoder.hpp"

namespace ulysses::tokenize {

std::unique_ptr<TextEncoder> load_hf_tokenizer(const std::filesystem::path& tokenizer_json);   // BadInput

}  // namespace ulysses::tokenize

// Mistral's Tekken tokenizer file (tekken.json: Mistral NeMo, Large 2, Small 3 and later; shipped in mistral-common),
// encoding as mistral-common's Tekkenizer.encode(text, bos=True, eos=False) does: tiktoken's byte-pair encoding
// with the file's pattern and the first default_vocab_size - default_num_special_tokens tokens as ranks (a piece
// that is a token is that token; otherwise the adjacent pair whose joined bytes rank lowest merges first, leftmost
// among equals), each id shifted past the special tokens; <s> (id 1) before every document; </s> (id 2) is its
// end-of-document token. Special-token text inside a document is encoded as text, as Tekkenizer does.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenize/text_encoder.hpp"

namespace ulysses::tokenize {

std::unique_ptr<TextEncoder> load_tekken(const std::filesystem::path& tekken_json);   // BadInput

}  // namespace ulysses::tokenize

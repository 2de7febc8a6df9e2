// A SentencePiece model (tokenizer.model: Llama 2, Mistral v1–v3, Gemma), encoded by the sentencepiece library
// itself (Debian's libsentencepiece): the ids of `SentencePieceProcessor.encode(text)`. Around every document, as
// transformers' LlamaTokenizer puts them: the BOS when tokenizer_config.json's add_bos_token is true (its default),
// the EOS when add_eos_token is. Control-token text inside a document ("<s>") is encoded as text, as sentencepiece
// does.
#pragma once

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "tokenize/text_encoder.hpp"

namespace ulysses::tokenize {

// config: the folder's tokenizer_config.json (an empty object when it has none). BadInput when the file is not a
// model sentencepiece can load.
std::unique_ptr<TextEncoder> load_sentencepiece(const std::filesystem::path& model, const nlohmann::json& config);

}  // namespace ulysses::tokenize

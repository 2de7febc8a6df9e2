#include "tokenize/tokenizer.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "tokenize/hf_tokenizer.hpp"
#include "tokenize/sentencepiece_model.hpp"
#include "tokenize/tekken.hpp"

namespace ulysses::tokenize {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// A folder's tokenizer files, the first present read: transformers' choice (the fast tokenizer.json), then
// Mistral's native tekken.json, then SentencePiece.
constexpr const char* kFiles[] = {"tokenizer.json", "tekken.json", "tokenizer.model"};

// A JSON file beside the tokenizer, as an object (or an empty one when absent).
Json folder_json(const fs::path& file, const std::string& hint) {
  if (!fs::exists(file)) return Json::object();
  Json j = read_json_file<Json>(file, hint);
  if (!j.is_object()) throw BadInput(fmt::format("{}: not a JSON object", file.string()), hint);
  return j;
}

}  // namespace

std::optional<std::size_t> invalid_utf8_at(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;   // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;   // no surrogates
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;   // at most U+10FFFF
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return i;
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::nullopt;
}

struct Tokenizer::Impl {
  fs::path file;
  std::string hash;
  std::unique_ptr<TextEncoder> encoder;
  std::optional<std::int32_t> eos;
  std::string eos_token;

  // tokenizer_config.json's eos_token, else generation_config.json's (first) eos_token_id.
  void read_eos(const fs::path& dir, const Json& config) {
    const Json token = config.value("eos_token", Json());
    const Json content = token.is_object() ? token.value("content", Json()) : token;
    eos_token = content.is_string() ? content.get<std::string>() : "";
    if (!eos_token.empty()) {
      eos = encoder->token_id(eos_token);
      if (!eos)
        throw BadInput(fmt::format("{}: eos_token \"{}\" is not a token of {}", (dir / "tokenizer_config.json").string(),
                                   eos_token, file.string()),
                       "the two files come from different models: copy both from the model's folder");
      return;
    }
    const fs::path gen = dir / "generation_config.json";
    if (!fs::exists(gen)) {   // the file's own, where it names one
      eos = encoder->own_eos();
      if (eos) eos_token = encoder->token_text(*eos);
      return;
    }
    const Json id = folder_json(gen, "fix or remove the file; it names the model's end-of-document token")
                        .value("eos_token_id", Json());
    const Json first = id.is_array() && !id.empty() ? id.at(0) : id;
    if (!first.is_number_integer()) return;
    eos = json_value<std::int32_t>(first, gen.string() + ": eos_token_id", "fix or remove the file");
    if (*eos < 0 || *eos >= encoder->vocab_size())
      throw BadInput(fmt::format("{}: eos_token_id {} is not an id of {} ({} ids)", gen.string(), *eos, file.string(),
                                 encoder->vocab_size()),
                     "the two files come from different models: copy both from the model's folder");
    eos_token = encoder->token_text(*eos);
  }
};

std::unique_ptr<Tokenizer::Impl> Tokenizer::load_file(const fs::path& file, const fs::path& dir) {
  auto impl = std::make_unique<Impl>();
  impl->file = file;
  impl->hash = xxh3_file_hex(file);
  const Json config = folder_json(dir / "tokenizer_config.json",
                                  "fix or remove the file; it names the model's special tokens");
  const bool tekken = file.filename().string().starts_with("tekken");
  impl->encoder = file.extension() == ".model" ? load_sentencepiece(file, config)
                  : tekken                     ? load_tekken(file)
                                               : load_hf_tokenizer(file);
  impl->read_eos(dir, config);
  return impl;
}

Tokenizer Tokenizer::load(const fs::path& path) {
  try {
    if (!fs::is_directory(path)) {
      if (!fs::exists(path))
        throw BadInput(fmt::format("--tokenizer {}: no such file", path.string()),
                       "pass the model folder, its tokenizer.json, tekken.json or tokenizer.model");
      return Tokenizer(load_file(path, path.parent_path()));
    }
    // transformers' AutoTokenizer takes the fast tokenizer.json when there is one; where this reader refuses it
    // (Llama 2's and Mistral's byte-fallback BPE), the next file of the folder is read instead
    std::optional<BadInput> first_refusal;
    for (const char* name : kFiles) {
      if (!fs::exists(path / name)) continue;
      try {
        return Tokenizer(load_file(path / name, path));
      } catch (const BadInput& e) {
        if (!first_refusal) first_refusal = e;
      }
    }
    if (first_refusal) throw *first_refusal;
    throw BadInput(fmt::format("--tokenizer {}: none of tokenizer.json, tekken.json, tokenizer.model", path.string()),
                   "pass the Hugging Face model folder that holds one, or the file itself");
  } catch (const Json::exception& e) {   // a config field of another type than the files' own
    throw BadInput(fmt::format("--tokenizer {}: {}", path.string(), e.what()),
                   "use the model's own tokenizer files (tokenizer_config.json, generation_config.json)");
  } catch (const fs::filesystem_error& e) {
    throw BadInput(fmt::format("--tokenizer {}: {}", path.string(), e.what()), "check the path and its permissions");
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out, bool add_special_tokens) const {
  if (const auto bad = invalid_utf8_at(text))
    throw TextError(*bad, fmt::format("byte {} of the text (0x{:02X}) is not valid UTF-8", *bad,
                                      static_cast<unsigned char>(text[*bad])));
  const TextEncoder& e = *impl_->encoder;
  if (add_special_tokens) out.insert(out.end(), e.prefix.begin(), e.prefix.end());
  e.encode(text, out);
  if (add_special_tokens) out.insert(out.end(), e.suffix.begin(), e.suffix.end());
}

std::int64_t Tokenizer::vocab_size() const { return impl_->encoder->vocab_size(); }
std::optional<std::int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
const fs::path& Tokenizer::file() const { return impl_->file; }
const std::string& Tokenizer::file_hash() const { return impl_->hash; }

std::string Tokenizer::describe(bool add_special_tokens, bool append_eos) const {
  const TextEncoder& e = *impl_->encoder;
  const std::string special = add_special_tokens
                                  ? fmt::format("{} added before / {} after each document", e.prefix.size(),
                                                e.suffix.size())
                                  : "no special token added (--no-add-special-tokens)";
  const std::string eos = impl_->eos ? fmt::format("{} ({})", impl_->eos_token, *impl_->eos) : "none";
  return fmt::format("{}: {}, {} ids, {}, EOS {}{}", impl_->file.string(), e.kind(), e.vocab_size(), special, eos,
                     append_eos ? " appended to each" : " (not appended: --no-append-eos)");
}

}  // namespace ulysses::tokenize

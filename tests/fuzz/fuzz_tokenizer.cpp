// The packer's tokenizer (src/tokenize) on outside bytes. The first byte (mod 3) picks what the rest is:
//   0  a tokenizer.json, or 2  a tekken.json: loaded (BadInput refuses it), then used on a fixed text that exercises
//      every stage;
//   1  a document's text, encoded with a small byte-level BPE tokenizer.json written here once (every byte, a
//      merge, an added token, Llama 3's regex): TextError (not UTF-8) is its way to refuse.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "tokenize/bpe.hpp"
#include "tokenize/tokenizer.hpp"

namespace {

using ulysses::tokenize::Tokenizer;

const Tokenizer& small_tokenizer() {
  static const Tokenizer t = [] {
    nlohmann::json vocab = nlohmann::json::object();
    const auto& chars = ulysses::tokenize::byte_level_chars();
    for (int b = 0; b < 256; ++b) vocab[chars[static_cast<std::size_t>(b)]] = b;
    vocab[chars[' '] + "t"] = 256;
    vocab["he"] = 257;
    const nlohmann::json file = {
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"model",
         {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({chars[' '] + " t", "h e"})}, {"ignore_merges", true}}},
        {"added_tokens", {{{"id", 258}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<|end|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
          {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {258}}}}}}}}};
    return Tokenizer::load(ulysses::fuzz::write_file("small-tokenizer.json", file.dump()));
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = ulysses::fuzz::as_text(data + 1, size - 1);
  std::vector<std::int32_t> ids;
  if (data[0] % 3 != 1) {
    const auto path = ulysses::fuzz::write_file(data[0] % 3 == 0 ? "tokenizer.json" : "tekken.json", rest);
    ulysses::fuzz::refuse_or_read([&] {
      const Tokenizer t = Tokenizer::load(path);
      t.encode("Hello <|end|> it's 12345 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac  \t\r\n x", ids);
    });
  } else {
    try {
      small_tokenizer().encode(rest, ids);
    } catch (const ulysses::tokenize::TextError&) {
    }
  }
  return 0;
}

#include "tokenize/tekken.hpp"

#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "tokenize/bpe.hpp"
#include "tokenize/regex_split.hpp"

namespace ulysses::tokenize {
namespace {

using Json = nlohmann::json;
constexpr const char* kHint = "use Mistral's own tekken.json (mistral-common ships them)";
// Tekkenizer's first special tokens (mistral-common); the rest up to the file's count are "<SPECIAL_i>".
constexpr const char* kSpecials[] = {"<unk>", "<s>", "</s>"};
constexpr std::int32_t kBos = 1, kEos = 2;

std::string base64_decode(const std::string& text, const std::string& where) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    if (c == '=') break;
    const auto v = alphabet.find(c);
    if (v == std::string::npos) throw BadInput(fmt::format("{}: token_bytes is not base64", where), kHint);
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    if ((count += 6) >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  return out;
}

std::string byte_level(const std::string& bytes) {
  std::string s;
  for (const char c : bytes) s += byte_level_chars()[static_cast<unsigned char>(c)];
  return s;
}

class Tekken final : public TextEncoder {
 public:
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
    std::vector<std::string_view> pieces;
    split->split(text, pieces);
    const std::size_t first = out.size();
    for (const std::string_view p : pieces) bpe->encode(p, out);
    for (std::size_t i = first; i < out.size(); ++i) out[i] += specials;
  }
  std::int64_t vocab_size() const override { return size; }
  std::optional<std::int32_t> token_id(const std::string& token) const override {
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(std::size(kSpecials)); ++i)
      if (token == kSpecials[i]) return i;
    return std::nullopt;
  }
  std::string token_text(std::int32_t id) const override {
    return id >= 0 && id < static_cast<std::int32_t>(std::size(kSpecials)) ? kSpecials[id] : "";
  }
  std::string kind() const override { return "Tekken (tiktoken BPE)"; }
  std::optional<std::int32_t> own_eos() const override { return kEos; }

  std::unique_ptr<RegexSplit> split;
  std::unique_ptr<BytePairEncoder> bpe;
  std::int32_t specials = 0;
  std::int64_t size = 0;
};

}  // namespace

std::unique_ptr<TextEncoder> load_tekken(const std::filesystem::path& file) {
  const std::string where = file.string();
  const Json j = read_json_file<Json>(file, kHint);
  auto t = std::make_unique<Tekken>();
  try {
    const Json& config = j.at("config");
    t->size = json_value<std::int32_t>(config.at("default_vocab_size"), where + ": default_vocab_size", kHint);
    t->specials = json_value<std::int32_t>(config.at("default_num_special_tokens"),
                                           where + ": default_num_special_tokens", kHint);
    const Json& vocab = j.at("vocab");
    const std::int64_t inner = t->size - t->specials;
    if (t->specials < static_cast<std::int32_t>(std::size(kSpecials)) || inner < 256 ||
        inner > static_cast<std::int64_t>(vocab.size()))
      throw BadInput(fmt::format("{}: default_vocab_size {} with {} special tokens does not fit its {} tokens", where,
                                 t->size, t->specials, vocab.size()), kHint);
    // The ranks: token i's bytes (in byte-level characters, as the BPE keeps them) has id i; every split of a token
    // into two tokens merges into it, at its rank.
    std::unordered_map<std::string, std::int32_t> ids;
    std::vector<std::string> tokens;
    for (std::int32_t i = 0; i < inner; ++i) {
      const std::string at = fmt::format("{}: vocab[{}]", where, i);
      if (json_value<std::int64_t>(vocab.at(i).at("rank"), at + ".rank", kHint) != i)
        throw BadInput(fmt::format("{} has rank {}, not {}", at, vocab.at(i).at("rank").dump(), i), kHint);
      tokens.push_back(byte_level(base64_decode(json_value<std::string>(vocab.at(i).at("token_bytes"), at, kHint), at)));
      ids.emplace(tokens.back(), i);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    std::vector<std::int32_t> ranks;
    for (std::int32_t i = 0; i < inner; ++i) {
      const std::string& token = tokens[static_cast<std::size_t>(i)];
      for (std::size_t cut = 1; cut < token.size(); ++cut) {   // on byte-level character boundaries
        if ((static_cast<unsigned char>(token[cut]) & 0xC0) == 0x80) continue;
        const std::string left = token.substr(0, cut), right = token.substr(cut);
        if (ids.count(left) != 0 && ids.count(right) != 0) {
          merges.emplace_back(left, right);
          ranks.push_back(i);
        }
      }
    }
    t->split = std::make_unique<RegexSplit>(json_value<std::string>(config.at("pattern"), where + ": pattern", kHint),
                                            where);
    t->bpe = std::make_unique<BytePairEncoder>(std::move(ids), merges, true, where, ranks);
  } catch (const Json::exception& e) {
    throw BadInput(fmt::format("{}: not a tekken.json this reader understands: {}", where, e.what()), kHint);
  }
  t->prefix = {kBos};
  return t;
}

}  // namespace ulysses::tokenize

#include "tokenize/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "tokenize/bpe.hpp"
#include "tokenize/regex_split.hpp"

namespace ulysses::tokenize {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// ByteLevel's own split when use_regex is true (GPT-2's pattern, as `tokenizers` writes it).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

[[noreturn]] void unsupported(const fs::path& file, const std::string& what) {
  throw BadInput(fmt::format("{}: {} is not supported", file.string(), what),
                 "ulysses-pack reads byte-level BPE tokenizer.json files (Llama 3, Qwen2/3, GPT-2 style); "
                 "tokenize with the model's own tokenizer and pack the ids (--tokens-key) otherwise");
}

std::string type_of(const Json& j) { return j.is_object() ? j.value("type", std::string("?")) : "?"; }

// Added tokens, cut out of a text leftmost-longest (tokenizers' AhoCorasick, MatchKind::LeftmostLongest).
class AddedTokens {
 public:
  void add(const std::string& content, std::int32_t id) {
    if (content.empty()) return;
    by_first_[static_cast<unsigned char>(content[0])].push_back({content, id});
  }
  bool empty() const {
    return std::all_of(by_first_.begin(), by_first_.end(), [](const auto& v) { return v.empty(); });
  }
  // Calls piece(text, -1) for each stretch between matches and piece(token, id) for each match, in order.
  template <class Fn>
  void split(std::string_view text, Fn&& piece) const {
    std::size_t gap = 0;
    for (std::size_t i = 0; i < text.size();) {
      const auto& candidates = by_first_[static_cast<unsigned char>(text[i])];
      const Entry* best = nullptr;
      for (const Entry& e : candidates)
        if ((best == nullptr || e.content.size() > best->content.size()) && text.substr(i, e.content.size()) == e.content)
          best = &e;
      if (best == nullptr) {
        ++i;
        continue;
      }
      if (i > gap) piece(text.substr(gap, i - gap), -1);
      piece(text.substr(i, best->content.size()), best->id);
      i += best->content.size();
      gap = i;
    }
    if (gap < text.size()) piece(text.substr(gap), -1);
  }

 private:
  struct Entry {
    std::string content;
    std::int32_t id;
  };
  std::array<std::vector<Entry>, 256> by_first_;
};

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  ULY_CHECK(n >= 0, "utf8proc NFC failed ({}) on text already checked as UTF-8", utf8proc_errmsg(n));
  std::string s(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return s;
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
  bool nfc = false;
  AddedTokens raw_added, normalized_added;
  std::vector<std::unique_ptr<RegexSplit>> splits;   // applied in sequence
  std::unique_ptr<BytePairEncoder> bpe;
  std::vector<std::int32_t> prefix, suffix;          // the post-processor's template around the text
  std::int64_t vocab_size = 0;
  std::optional<std::int32_t> eos;
  std::string eos_token;
  std::map<std::string, std::int32_t> added_ids;     // every added token's text → id

  void pre_tokenize(std::string_view text, std::vector<std::int32_t>& out) const {
    std::vector<std::string_view> pieces{text}, next;
    for (const auto& split : splits) {
      next.clear();
      for (const std::string_view p : pieces) split->split(p, next);
      pieces.swap(next);
    }
    for (const std::string_view p : pieces) bpe->encode(p, out);
  }
  void normalized_piece(std::string_view text, std::vector<std::int32_t>& out) const {
    const std::string normalized = nfc ? tokenize::nfc(text) : std::string();
    const std::string_view t = nfc ? std::string_view(normalized) : text;
    normalized_added.split(t, [&](std::string_view piece, std::int32_t id) {
      if (id >= 0) out.push_back(id);
      else pre_tokenize(piece, out);
    });
  }

  void read_normalizer(const Json& j) {
    if (j.is_null()) return;
    if (type_of(j) != "NFC") unsupported(file, fmt::format("normalizer \"{}\"", type_of(j)));
    nfc = true;
  }
  void read_pre_tokenizer(const Json& j) {
    const std::string type = type_of(j);
    if (type == "Sequence") {
      for (const Json& p : j.at("pretokenizers")) read_pre_tokenizer(p);
    } else if (type == "Split") {
      if (j.value("behavior", "") != "Isolated" || j.value("invert", false))
        unsupported(file, fmt::format("Split pre-tokenizer with behavior \"{}\"{}", j.value("behavior", ""),
                                      j.value("invert", false) ? " inverted" : ""));
      const Json& pattern = j.at("pattern");
      if (!pattern.contains("Regex")) unsupported(file, "a Split pre-tokenizer on a plain string");
      splits.push_back(std::make_unique<RegexSplit>(pattern.at("Regex").get<std::string>(), file.string()));
    } else if (type == "ByteLevel") {
      if (j.value("add_prefix_space", false)) unsupported(file, "ByteLevel with add_prefix_space");
      if (j.value("use_regex", true)) splits.push_back(std::make_unique<RegexSplit>(kGpt2Pattern, file.string()));
    } else {
      unsupported(file, fmt::format("pre-tokenizer \"{}\"", type));
    }
  }
  void read_model(const Json& m) {
    if (type_of(m) != "BPE") unsupported(file, fmt::format("model \"{}\"", type_of(m)));
    if (m.value("byte_fallback", false)) unsupported(file, "BPE with byte_fallback (SentencePiece-style)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"})
      if (m.contains(key) && !m.at(key).is_null() && m.at(key) != "") unsupported(file, fmt::format("BPE {}", key));
    auto vocab = m.at("vocab").get<std::unordered_map<std::string, std::int32_t>>();
    std::vector<std::pair<std::string, std::string>> merges;
    for (const Json& merge : m.at("merges")) {
      if (merge.is_array()) {
        merges.emplace_back(merge.at(0).get<std::string>(), merge.at(1).get<std::string>());
      } else {
        const std::string text = merge.get<std::string>();
        const auto space = text.find(' ');
        if (space == std::string::npos) unsupported(file, fmt::format("merge \"{}\" without a space", text));
        merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      }
    }
    bpe = std::make_unique<BytePairEncoder>(std::move(vocab), merges, m.value("ignore_merges", false), file.string());
    vocab_size = bpe->max_id() + 1;
  }
  void read_added_tokens(const Json& list) {
    for (const Json& t : list) {
      const auto content = t.at("content").get<std::string>();
      const auto id = t.at("id").get<std::int32_t>();
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (t.value(flag, false)) unsupported(file, fmt::format("added token \"{}\" with {}", content, flag));
      (t.value("normalized", false) ? normalized_added : raw_added).add(content, id);
      added_ids[content] = id;
      vocab_size = std::max<std::int64_t>(vocab_size, std::int64_t{id} + 1);
    }
  }
  void read_post_processor(const Json& j) {
    if (j.is_null() || type_of(j) == "ByteLevel") return;
    if (type_of(j) == "Sequence") {
      for (const Json& p : j.at("processors")) read_post_processor(p);
      return;
    }
    if (type_of(j) != "TemplateProcessing") unsupported(file, fmt::format("post-processor \"{}\"", type_of(j)));
    bool seen_text = false;
    for (const Json& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_text = true;
        continue;
      }
      const auto name = item.at("SpecialToken").at("id").get<std::string>();
      for (const Json& id : j.at("special_tokens").at(name).at("ids"))
        (seen_text ? suffix : prefix).push_back(id.get<std::int32_t>());
    }
  }
  std::optional<std::int32_t> id_of(const std::string& token) const {
    if (const auto it = added_ids.find(token); it != added_ids.end()) return it->second;
    std::string chars;   // a vocabulary entry is spelled in byte-level characters
    for (const char c : token) chars += byte_level_chars()[static_cast<unsigned char>(c)];
    if (const auto it = bpe->vocab().find(chars); it != bpe->vocab().end()) return it->second;
    return std::nullopt;
  }
  void read_eos(const fs::path& dir) {
    const std::string hint = "fix or remove the file; it names the model's end-of-document token";
    if (const fs::path config = dir / "tokenizer_config.json"; fs::exists(config)) {
      const Json c = read_json_file<Json>(config, hint);
      const Json token = c.value("eos_token", Json());
      eos_token = token.is_object() ? token.value("content", "") : token.is_string() ? token.get<std::string>() : "";
      if (!eos_token.empty()) {
        eos = id_of(eos_token);
        if (!eos)
          throw BadInput(fmt::format("{}: eos_token \"{}\" is not a token of {}", config.string(), eos_token,
                                     file.string()),
                         "the two files come from different models: copy both from the model's folder");
        return;
      }
    }
    if (const fs::path gen = dir / "generation_config.json"; fs::exists(gen)) {
      const Json g = read_json_file<Json>(gen, hint);
      const Json id = g.value("eos_token_id", Json());
      const Json first = id.is_array() && !id.empty() ? id.at(0) : id;
      if (first.is_number_integer()) {
        eos = first.get<std::int32_t>();
        for (const auto& [text, added] : added_ids)
          if (added == *eos) eos_token = text;
      }
    }
  }
};

Tokenizer Tokenizer::load(const fs::path& path) {
  const bool is_dir = fs::is_directory(path);
  const fs::path file = is_dir ? path / "tokenizer.json" : path;
  if (!fs::exists(file)) {
    const bool sentencepiece = is_dir && fs::exists(path / "tokenizer.model");
    throw BadInput(fmt::format("--tokenizer {}: no tokenizer.json{}", path.string(),
                               sentencepiece ? " (only a SentencePiece tokenizer.model, which is not supported yet)" : ""),
                   "pass the Hugging Face model folder that holds tokenizer.json, or the file itself");
  }
  auto impl = std::make_unique<Impl>();
  impl->file = file;
  impl->hash = xxh3_file_hex(file);
  const std::string hint = "use the model's own tokenizer.json (a download cut short is the usual cause)";
  try {
    const Json j = read_json_file<Json>(file, hint);
    impl->read_model(j.at("model"));
    impl->read_normalizer(j.value("normalizer", Json()));
    impl->read_pre_tokenizer(j.value("pre_tokenizer", Json()));
    impl->read_added_tokens(j.value("added_tokens", Json::array()));
    impl->read_post_processor(j.value("post_processor", Json()));
  } catch (const Json::exception& e) {
    throw BadInput(fmt::format("{}: not a tokenizer.json this reader understands: {}", file.string(), e.what()), hint);
  }
  if (impl->splits.empty()) unsupported(file, "a BPE without a ByteLevel or Split pre-tokenizer");
  impl->read_eos(is_dir ? path : file.parent_path());
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const {
  if (const auto bad = invalid_utf8_at(text))
    throw TextError(*bad, fmt::format("byte {} of the text (0x{:02X}) is not valid UTF-8", *bad,
                                      static_cast<unsigned char>(text[*bad])));
  out.insert(out.end(), impl_->prefix.begin(), impl_->prefix.end());
  impl_->raw_added.split(text, [&](std::string_view piece, std::int32_t id) {
    if (id >= 0) out.push_back(id);
    else impl_->normalized_piece(piece, out);
  });
  out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
}

std::int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<std::int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
const fs::path& Tokenizer::file() const { return impl_->file; }
const std::string& Tokenizer::file_hash() const { return impl_->hash; }

std::string Tokenizer::describe() const {
  return fmt::format("{}: byte-level BPE, {} ids{}, {} added before / {} after each document, EOS {}",
                     impl_->file.string(), impl_->vocab_size, impl_->nfc ? ", NFC" : "", impl_->prefix.size(),
                     impl_->suffix.size(), impl_->eos ? fmt::format("{} ({})", impl_->eos_token, *impl_->eos) : "none");
}

}  // namespace ulysses::tokenize

#include "tokenize/hf_tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

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

// A token id from the file: an integer in [0, 2^31), checked before any conversion (json_value).
std::int32_t token_id(const Json& v, const fs::path& file, const std::string& what) {
  const std::string where = fmt::format("{}: {}", file.string(), what);
  const std::string hint = "use the model's own tokenizer.json (a download cut short is the usual cause)";
  const auto id = json_value<std::int32_t>(v, where, hint);
  if (id < 0) throw BadInput(fmt::format("{} is {}, not a token id (>= 0)", where, id), hint);
  return id;
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

class HfTokenizer final : public TextEncoder {
 public:
  fs::path file;
  bool nfc = false;
  AddedTokens raw_added, normalized_added;
  std::vector<std::unique_ptr<RegexSplit>> splits;   // applied in sequence
  std::unique_ptr<BytePairEncoder> bpe;
  std::int64_t size = 0;                             // the largest id + 1
  std::map<std::string, std::int32_t> added_ids;     // every added token's text → id

  void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
    raw_added.split(text, [&](std::string_view piece, std::int32_t id) {
      if (id >= 0) out.push_back(id);
      else normalized_piece(piece, out);
    });
  }
  std::int64_t vocab_size() const override { return size; }
  std::string kind() const override { return nfc ? "byte-level BPE, NFC" : "byte-level BPE"; }
  std::optional<std::int32_t> token_id(const std::string& token) const override {
    if (const auto it = added_ids.find(token); it != added_ids.end()) return it->second;
    std::string chars;   // a vocabulary entry is spelled in byte-level characters
    for (const char c : token) chars += byte_level_chars()[static_cast<unsigned char>(c)];
    if (const auto it = bpe->vocab().find(chars); it != bpe->vocab().end()) return it->second;
    return std::nullopt;
  }
  std::string token_text(std::int32_t id) const override {
    for (const auto& [text, added] : added_ids)
      if (added == id) return text;
    return "";
  }


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
    std::unordered_map<std::string, std::int32_t> vocab;
    for (const auto& [token, id] : m.at("vocab").items())
      vocab.emplace(token, tokenize::token_id(id, file, fmt::format("the id of vocabulary entry \"{}\"", token)));
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
    size = bpe->max_id() + 1;
  }
  void read_added_tokens(const Json& list) {
    for (const Json& t : list) {
      const auto content = t.at("content").get<std::string>();
      const auto id = tokenize::token_id(t.at("id"), file, fmt::format("the id of added token \"{}\"", content));
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (t.value(flag, false)) unsupported(file, fmt::format("added token \"{}\" with {}", content, flag));
      (t.value("normalized", false) ? normalized_added : raw_added).add(content, id);
      added_ids[content] = id;
      size = std::max<std::int64_t>(size, std::int64_t{id} + 1);
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
        (seen_text ? suffix : prefix).push_back(tokenize::token_id(id, file, "a post-processor template id"));
    }
  }
};

}  // namespace

std::unique_ptr<TextEncoder> load_hf_tokenizer(const fs::path& file) {
  auto t = std::make_unique<HfTokenizer>();
  t->file = file;
  const std::string hint = "use the model's own tokenizer.json (a download cut short is the usual cause)";
  try {
    const Json j = read_json_file<Json>(file, hint);
    t->read_model(j.at("model"));
    t->read_normalizer(j.value("normalizer", Json()));
    t->read_pre_tokenizer(j.value("pre_tokenizer", Json()));
    t->read_added_tokens(j.value("added_tokens", Json::array()));
    t->read_post_processor(j.value("post_processor", Json()));
  } catch (const Json::exception& e) {
    throw BadInput(fmt::format("{}: not a tokenizer.json this reader understands: {}", file.string(), e.what()), hint);
  }
  if (t->splits.empty()) unsupported(file, "a BPE without a ByteLevel or Split pre-tokenizer");
  return t;
}

}  // namespace ulysses::tokenize

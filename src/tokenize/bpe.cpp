#include "tokenize/bpe.hpp"

#include <algorithm>
#include <queue>

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::tokenize {
namespace {

std::string utf8(std::uint32_t cp) {   // code points below U+0800 are all this mapping needs
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

const std::vector<std::string>& byte_level_chars() {
  static const std::vector<std::string> chars = [] {
    std::vector<std::string> out(256);
    std::uint32_t shifted = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      out[b] = utf8(printable ? b : shifted++);
    }
    return out;
  }();
  return chars;
}

BytePairEncoder::BytePairEncoder(std::unordered_map<std::string, std::int32_t> vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                                 const std::string& file, const std::vector<std::int32_t>& ranks)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  ULY_CHECK(ranks.empty() || ranks.size() == merges.size(), "{} ranks for {} merges", ranks.size(), merges.size());
  for (const auto& [token, id] : vocab_) max_id_ = std::max(max_id_, id);
  const auto& chars = byte_level_chars();
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(chars[static_cast<std::size_t>(b)]);
    if (it == vocab_.end())
      throw BadInput(fmt::format("{}: the vocabulary has no entry for byte 0x{:02X} ('{}'): not a byte-level BPE", file,
                                 b, chars[static_cast<std::size_t>(b)]),
                     "use the model's own tokenizer.json (Llama 3, Qwen2/3 and GPT-2 style byte-level BPE)");
    byte_id_[b] = it->second;
  }
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto a = vocab_.find(left), b = vocab_.find(right), m = vocab_.find(left + right);
    if (a == vocab_.end() || b == vocab_.end() || m == vocab_.end())
      throw BadInput(fmt::format("{}: merge {} ('{} {}') names a token that is not in the vocabulary", file, rank, left,
                                 right),
                     "the file is damaged or not a BPE tokenizer.json: take it from the model's folder again");
    const auto r = ranks.empty() ? static_cast<std::int32_t>(rank) : ranks[rank];
    merges_[pair_key(a->second, b->second)] = Merge{r, m->second};   // as tokenizers: the last wins
  }
}

// tokenizers' Word::merge_all: a heap of (rank, position) over the adjacent pairs; each pop merges its pair if it is
// still there, then offers the new symbol's pairs with its neighbours.
void BytePairEncoder::merge_all(std::vector<std::int32_t>& symbols) const {
  const std::size_t n = symbols.size();
  std::vector<std::int32_t> prev(n), next(n);   // a doubly linked list over the live symbols; -1 ends it
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
  }
  struct Candidate {
    std::int32_t rank, pos, id;   // the pair starting at pos merges into id
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](std::int32_t pos) {
    if (pos < 0 || next[static_cast<std::size_t>(pos)] < 0) return;
    const std::int32_t right = symbols[static_cast<std::size_t>(next[static_cast<std::size_t>(pos)])];
    const auto it = merges_.find(pair_key(symbols[static_cast<std::size_t>(pos)], right));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) offer(static_cast<std::int32_t>(i));
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto pos = static_cast<std::size_t>(c.pos);
    if (dead[pos] || next[pos] < 0) continue;
    const auto right = static_cast<std::size_t>(next[pos]);
    const auto it = merges_.find(pair_key(symbols[pos], symbols[right]));
    if (it == merges_.end() || it->second.id != c.id) continue;   // stale: the pair there now merges otherwise
    symbols[pos] = c.id;
    dead[right] = true;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[static_cast<std::size_t>(next[pos])] = c.pos;
    offer(prev[pos]);
    offer(c.pos);
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!dead[i]) symbols[w++] = symbols[i];
  symbols.resize(w);
}

void BytePairEncoder::encode(std::string_view bytes, std::vector<std::int32_t>& out) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    std::string word;
    for (const char c : bytes) word += byte_level_chars()[static_cast<unsigned char>(c)];
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<std::int32_t> symbols;
  symbols.reserve(bytes.size());
  for (const char c : bytes) symbols.push_back(byte_id_[static_cast<unsigned char>(c)]);
  merge_all(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace ulysses::tokenize

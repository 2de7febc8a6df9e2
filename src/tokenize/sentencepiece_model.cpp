#include "tokenize/sentencepiece_model.hpp"

#include <sentencepiece_processor.h>

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::tokenize {
namespace {

class SentencePieceModel final : public TextEncoder {
 public:
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
    std::vector<int> ids;
    const auto status = sp.Encode(text, &ids);
    ULY_CHECK(status.ok(), "sentencepiece: {}", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::int64_t vocab_size() const override { return sp.GetPieceSize(); }
  std::optional<std::int32_t> token_id(const std::string& token) const override {
    const int id = sp.PieceToId(token);
    if (id == sp.unk_id() && token != sp.IdToPiece(sp.unk_id())) return std::nullopt;
    return id;
  }
  std::string token_text(std::int32_t id) const override {
    return id >= 0 && id < sp.GetPieceSize() ? sp.IdToPiece(id) : "";
  }
  std::string kind() const override { return "SentencePiece"; }
  std::optional<std::int32_t> own_eos() const override {
    return sp.eos_id() >= 0 ? std::optional<std::int32_t>(sp.eos_id()) : std::nullopt;
  }

  sentencepiece::SentencePieceProcessor sp;
};

// A special token the processor has (bos_id/eos_id are -1 when the model has none).
void add_if(std::vector<std::int32_t>& to, int id, bool wanted, const std::filesystem::path& model, const char* flag) {
  if (!wanted) return;
  if (id < 0)
    throw BadInput(fmt::format("{}: tokenizer_config.json sets {} but the model has no such token", model.string(), flag),
                   "set it to false in tokenizer_config.json, or use the model's own tokenizer.model");
  to.push_back(id);
}

}  // namespace

std::unique_ptr<TextEncoder> load_sentencepiece(const std::filesystem::path& model, const nlohmann::json& config) {
  auto m = std::make_unique<SentencePieceModel>();
  if (const auto status = m->sp.Load(model.string()); !status.ok())
    throw BadInput(fmt::format("{}: not a SentencePiece model: {}", model.string(), status.ToString()),
                   "use the model's own tokenizer.model (a download cut short is the usual cause)");
  const auto flag = [&](const char* key, bool fallback) {
    const auto it = config.find(key);
    return it != config.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  add_if(m->prefix, m->sp.bos_id(), flag("add_bos_token", true), model, "add_bos_token");
  add_if(m->suffix, m->sp.eos_id(), flag("add_eos_token", false), model, "add_eos_token");
  return m;
}

}  // namespace ulysses::tokenize

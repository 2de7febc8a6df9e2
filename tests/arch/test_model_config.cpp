// Unit tests of the model description (arch/), torch-free: config.json validation for every architecture
// row, the parameter table against transformers' names and hand-counted sizes, and the heads per SP rank.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "arch/model_config.hpp"
#include "arch/parameters.hpp"
#include "core/error.hpp"

namespace ulysses::arch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json llama_json() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 64},
          {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5},
          {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
}

ModelConfig config_of(const json& j) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("ulysses-test-arch-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << j.dump();
  ModelConfig c;
  try {
    c = read_model_config(dir / "config.json");
  } catch (...) {
    fs::remove_all(dir);
    throw;
  }
  fs::remove_all(dir);
  return c;
}

// ---- config.json -------------------------------------------------------------------------------

TEST(ModelConfig, ReadsLlamaWithDerivedHeadDim) {
  auto c = config_of(llama_json());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.rope.scaling || c.sliding_window || c.pad_token_id || c.qkv_bias || c.qk_norm);
}

TEST(ModelConfig, ReadsTheFeaturesOfEachArchitecture) {
  auto j = llama_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["attention_bias"] = true;
  auto llama = config_of(j);
  ASSERT_TRUE(llama.rope.scaling);
  EXPECT_EQ(llama.rope.scaling->kind, RopeKind::kLlama3);
  EXPECT_EQ(llama.rope.scaling->original_max_position_embeddings, 8192);
  EXPECT_TRUE(llama.qkv_bias && llama.o_bias);

  j = llama_json();
  j["model_type"] = "qwen2";
  j["architectures"] = {"Qwen2ForCausalLM"};
  auto qwen2 = config_of(j);
  EXPECT_TRUE(qwen2.qkv_bias && !qwen2.o_bias);

  j["model_type"] = "qwen3";
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 12;
  auto qwen3 = config_of(j);
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 12);

  j = llama_json();
  j["model_type"] = "mistral";
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(config_of(j).sliding_window);
  j["sliding_window"] = 4096;
  EXPECT_EQ(config_of(j).sliding_window, 4096);

  // a mixture of experts: the class defaults, and which layers are sparse
  j = llama_json();
  j["model_type"] = "qwen3_moe";
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["head_dim"] = 8;
  j["num_hidden_layers"] = 4;
  j["mlp_only_layers"] = {0};
  j["decoder_sparse_step"] = 2;
  const ModelConfig moe = config_of(j);
  EXPECT_EQ(moe.moe.experts, 128);   // Qwen3MoeConfig's defaults
  EXPECT_EQ(moe.moe.top_k, 8);
  EXPECT_EQ(moe.moe.expert_intermediate, 768);
  EXPECT_FALSE(moe.moe.normalize_top_k || moe.moe.router_loss);
  EXPECT_EQ(sparse_layer_count(moe.moe, 4), 2);   // (i + 1) % 2 == 0: layers 1 and 3
  EXPECT_TRUE(sparse_layer(moe.moe, 1) && sparse_layer(moe.moe, 3) && !sparse_layer(moe.moe, 2));
  j["output_router_logits"] = true;
  EXPECT_TRUE(config_of(j).moe.router_loss);
  j["router_aux_loss_coef"] = 0.0;   // on, but of no weight: not trained
  EXPECT_FALSE(config_of(j).moe.router_loss);
}

struct BadConfig {
  const char* what;
  json patch;              // merged into llama_json(); a null value removes the key
  const char* expect;      // in the message
};

TEST(ModelConfig, RejectsWhatItCannotComputeExactly) {
  const std::vector<BadConfig> cases = {
      {"missing field", {{"hidden_size", nullptr}}, "\"hidden_size\" is required"},
      {"unknown type", {{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}}, "\"gpt2\" is not supported"},
      {"another head", {{"architectures", {"LlamaForSequenceClassification"}}}, "architectures"},
      {"activation", {{"hidden_act", "gelu"}}, "hidden_act"},
      {"rope type", {{"rope_scaling", {{"rope_type", "ntk-by-parts"}, {"factor", 4.0}}}}, "\"ntk-by-parts\"; supported"},
      {"dynamic rope", {{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 4.0}}}}, "\"dynamic\" recomputes"},
      {"rope key", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"low_freq_factor", 1.0}}}},
       "key \"low_freq_factor\" is not one rope_type \"yarn\" takes"},
      {"yarn factor", {{"rope_scaling", {{"rope_type", "yarn"}, {"original_max_position_embeddings", 64}}}},
       "\"factor\" is required"},
      {"yarn length", {{"max_position_embeddings", nullptr}, {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}}}},
       "\"max_position_embeddings\" is required"},
      {"rope types", {{"rope_scaling", {{"rope_type", "yarn"}, {"type", "linear"}, {"factor", 2.0}}}}, "differ"},
      {"longrope factors", {{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}, {"short_factor", {1.0}},
                                              {"long_factor", {1.0}}}}}, "a list of 4 positive numbers"},
      {"rope theta", {{"rope_theta", 0.5}}, "rope_theta"},
      {"llama3 field", {{"rope_scaling", {{"type", "llama3"}, {"factor", 8.0}}}}, "low_freq_factor"},
      {"kv heads", {{"num_key_value_heads", 3}}, "must divide num_attention_heads (4)"},
      {"mlp bias", {{"mlp_bias", true}}, "mlp_bias"},
      {"dropout", {{"attention_dropout", 0.1}}, "attention_dropout"},
      {"partial rotary", {{"partial_rotary_factor", 0.5}}, "partial_rotary_factor"},
      {"pad id", {{"pad_token_id", 64}}, "pad_token_id"},
      {"qwen3 head_dim", {{"model_type", "qwen3"}, {"architectures", {"Qwen3ForCausalLM"}}}, "\"head_dim\""},
      {"qwen window", {{"model_type", "qwen2"}, {"architectures", {"Qwen2ForCausalLM"}}, {"use_sliding_window", true}},
       "use_sliding_window"},
      {"mistral window", {{"model_type", "mistral"}, {"architectures", {"MistralForCausalLM"}}}, "sliding_window"},
      // mixtures of experts (Qwen3-MoE's fields; Mixtral's jitter)
      {"moe top-k", {{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}}, {"head_dim", 8},
                     {"num_experts", 4}, {"num_experts_per_tok", 6}}, "(6) must be at most num_experts (4)"},
      {"moe experts", {{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}}, {"head_dim", 8},
                       {"num_experts", -2}}, "num_experts"},
      {"moe dense layer", {{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}}, {"head_dim", 8},
                           {"mlp_only_layers", {0, 5}}}, "in [0, 2) (got 5)"},
      {"moe coefficient", {{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}}, {"head_dim", 8},
                           {"router_aux_loss_coef", -0.1}}, "router_aux_loss_coef"},
      {"moe expert size", {{"model_type", "qwen2_moe"}, {"architectures", {"Qwen2MoeForCausalLM"}},
                           {"moe_intermediate_size", 0}}, "moe_intermediate_size"},
      {"mixtral jitter", {{"model_type", "mixtral"}, {"architectures", {"MixtralForCausalLM"}},
                          {"sliding_window", nullptr}, {"router_jitter_noise", 0.1}}, "router_jitter_noise"},
      // declared sizes that would allocate without end (a 3e8-layer config hung and took 7 GB)
      {"layers", {{"num_hidden_layers", 300000000}}, "\"num_hidden_layers\" is 300000000, more than the 4096"},
      {"vocabulary", {{"vocab_size", std::int64_t{1} << 40}}, "more than the 16777216 this toolkit accepts"},
      {"heads", {{"num_attention_heads", 1 << 20}}, "\"num_attention_heads\" is 1048576"},
      {"total", {{"hidden_size", 1 << 24}, {"intermediate_size", 1 << 24}, {"num_hidden_layers", 2048}},
       "more than the 1.76e+13 this toolkit accepts"},
  };
  for (const auto& c : cases) {
    auto j = llama_json();
    j.merge_patch(c.patch);
    try {
      config_of(j);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << c.what << ": " << e.what();
    }
  }
}


// ---- parameters --------------------------------------------------------------------------------

TEST(Parameters, NamesShapesAndCountsAsTransformersBuildsThem) {
  const ModelConfig c = config_of(llama_json());   // V 64, hidden 32, I 48, 2 layers, H 4, Hkv 2, D 8
  const std::vector<ParameterSpec> p = parameters(c);
  const std::vector<std::string> first = {
      "model.embed_tokens.weight",
      "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
      "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
      "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
      "model.layers.1.self_attn.q_proj.weight"};
  ASSERT_EQ(p.size(), 1 + 2 * 9 + 2u);
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(p[i].name, first[i]);
  EXPECT_EQ(p.back().name, "lm_head.weight");
  EXPECT_EQ(p[p.size() - 2].name, "model.norm.weight");
  EXPECT_EQ(p[2].shape, (std::vector<std::int64_t>{16, 32}));   // k_proj [Hkv*D, hidden]
  EXPECT_EQ(p[4].shape, (std::vector<std::int64_t>{32, 32}));   // o_proj [hidden, H*D]
  EXPECT_EQ(p[7].shape, (std::vector<std::int64_t>{32, 48}));   // down_proj [hidden, I]
  EXPECT_EQ(p[0].layer, -1);
  EXPECT_EQ(p[1].layer, 0);
  EXPECT_EQ(p[10].layer, 1);
  // by hand: q 1024 + k 512 + v 512 + o 1024 + 3 × 1536 (MLP) + 2 × 32 (norms) = 7744 per layer;
  // embeddings 2048, final norm 32, head 2048
  EXPECT_EQ(layer_parameter_count(c), 7744);
  EXPECT_EQ(parameter_count(c), 2048 + 2 * 7744 + 32 + 2048);
  // matrices only (no norms), the untied embedding table being a lookup: 2 × (3072 + 4608) + 2048 (head)
  EXPECT_EQ(matmul_parameter_count(c), 2 * (3072 + 4608) + 2048);
}

TEST(Parameters, FollowTheFeaturesOfEachArchitecture) {
  auto j = llama_json();
  j["tie_word_embeddings"] = true;
  EXPECT_EQ(parameters(config_of(j)).back().name, "model.norm.weight");   // the head reuses the embeddings

  j = llama_json();
  j["model_type"] = "qwen3";
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 12;
  j["attention_bias"] = true;
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameters(config_of(j)))
    if (p.layer == 0) names.push_back(p.name.substr(std::string("model.layers.0.").size()));
  EXPECT_EQ(names, (std::vector<std::string>{
                       "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
                       "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                       "self_attn.o_proj.weight", "self_attn.o_proj.bias", "self_attn.q_norm.weight",
                       "self_attn.k_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                       "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}));
}

TEST(Parameters, LoraFactorsOfTheNamedProjectionsOnly) {
  const ModelConfig c = config_of(llama_json());   // hidden 32, I 48, H 4 x D 8 = 32, Hkv 2 x D 8 = 16
  const std::vector<ParameterSpec> p = lora_parameters(c, 4, {"v_proj", "down_proj"});
  ASSERT_EQ(p.size(), 2 * 2 * 2u);   // 2 layers x 2 projections x (A, B)
  EXPECT_EQ(p[0].name, "model.layers.0.self_attn.v_proj.lora_A.weight");
  EXPECT_EQ(p[0].shape, (std::vector<std::int64_t>{4, 32}));    // A [r, in]
  EXPECT_EQ(p[1].name, "model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(p[1].shape, (std::vector<std::int64_t>{16, 4}));    // B [out, r]
  EXPECT_EQ(p[3].name, "model.layers.0.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(p[2].shape, (std::vector<std::int64_t>{4, 48}));
  EXPECT_EQ(p[4].layer, 1);
  EXPECT_TRUE(lora_parameters(c, 4, {}).empty());
}

// ---- heads per SP rank -------------------------------------------------------------------------

TEST(UlyssesHeads, SplitsQueryHeadsAndReplicatesFewKvHeads) {
  const ModelConfig c = config_of(llama_json());   // H 4, Hkv 2
  EXPECT_EQ(ulysses_heads(c, 1).q, 4);
  EXPECT_EQ(ulysses_heads(c, 1).kv, 2);
  EXPECT_EQ(ulysses_heads(c, 2).q, 2);
  EXPECT_EQ(ulysses_heads(c, 2).kv, 1);
  EXPECT_EQ(ulysses_heads(c, 4).q, 1);
  EXPECT_EQ(ulysses_heads(c, 4).kv, 1);   // 2 kv heads replicated to 4, one per rank
}

TEST(UlyssesHeads, RejectsDegreesThatDoNotSplitTheHeads) {
  const ModelConfig c = config_of(llama_json());
  for (std::int64_t p : {1, 2, 4}) EXPECT_NO_THROW(check_heads_for_sp(c, p, "config.json"));
  try {
    check_heads_for_sp(c, 3, "config.json");
    ADD_FAILURE() << "4 heads accepted at SP 3";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), "config.json: attention heads (4) are not divisible by --sp (3)");
    EXPECT_EQ(e.hint(), "use --sp 1, 2, 4");
  }
  auto j = llama_json();
  j["num_attention_heads"] = 12;
  j["num_key_value_heads"] = 4;
  j["hidden_size"] = 96;
  try {
    check_heads_for_sp(config_of(j), 6, "config.json");   // 12 % 6 == 0, but 4 and 6 divide neither way
    ADD_FAILURE() << "4 kv heads accepted at SP 6";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), "config.json: key/value heads (4) and --sp (6) divide neither way");
    EXPECT_EQ(e.hint(), "use --sp 1, 2, 4, 12");
  }
  // with a ring the heads split over the Ulysses degree only: SP 32 as 4 × a ring of 8 fits 4 heads, 8 × 4 does not
  EXPECT_NO_THROW(check_heads_for_sp(c, 32, "config.json", 8));
  try {
    check_heads_for_sp(c, 32, "config.json", 4);
    ADD_FAILURE() << "4 heads accepted at Ulysses 8";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()),
              "config.json: attention heads (4) are not divisible by the Ulysses degree (8 = --sp 32 / --sp-ring 4)");
    EXPECT_EQ(e.hint(), "make --sp / --sp-ring one of 1, 2, 4 (a larger --sp-ring)");
  }
}

}  // namespace
}  // namespace ulysses::arch

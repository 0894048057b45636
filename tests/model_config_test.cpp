#include "engine/model/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test_util::TempDir;

json nanogpt_json() {
  return {{"format", "nanogpt"}, {"n_layer", 4},      {"n_head", 4},  {"n_embd", 64},
          {"vocab_size", 65},    {"block_size", 128}, {"gelu", "erf"}};
}

json hf_json() {
  return {{"model_type", "gpt2"}, {"n_layer", 12},       {"n_head", 12},
          {"n_embd", 768},        {"vocab_size", 50257}, {"n_positions", 1024}};
}

std::expected<ModelConfig, std::string> parse(const json& j, const fs::path& dir = "/models/x") {
  return ModelConfig::parse(j.dump(), dir);
}

// Asserts that parsing fails and the message mentions `needle` (usually the key).
void expect_error(const json& j, const std::string& needle) {
  auto c = parse(j);
  ASSERT_FALSE(c.has_value()) << j.dump();
  EXPECT_NE(c.error().find(needle), std::string::npos)
      << "error '" << c.error() << "' does not mention '" << needle << "'";
}

TEST(ModelConfigTest, NanoGptDefaults) {
  auto c = parse(nanogpt_json());
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->n_layer, 4);
  EXPECT_EQ(c->n_head, 4);
  EXPECT_EQ(c->n_kv_head, 4);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->vocab_size, 65);
  EXPECT_EQ(c->block_size, 128);
  EXPECT_TRUE(c->bias);
  EXPECT_EQ(c->gelu, Gelu::kErf);
  EXPECT_EQ(c->weight_layout, kernels::WeightLayout::kOutIn);
  EXPECT_FLOAT_EQ(c->layer_norm_eps, 1e-5f);
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kNone);
  EXPECT_EQ(c->head_dim(), 16);
  EXPECT_EQ(c->kv_dim(), 64);
}

TEST(ModelConfigTest, NanoGptAllKeys) {
  json j = nanogpt_json();
  j["n_kv_head"] = 2;
  j["bias"] = false;
  j["gelu"] = "tanh";
  j["weight_layout"] = "in_out";
  j["layer_norm_eps"] = 1e-6;
  j["tokenizer"] = {{"type", "char"}, {"vocab", "vocab.json"}};
  j["dropout"] = 0.1;  // training-only keys are ignored
  auto c = parse(j, "/models/char");
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->n_kv_head, 2);
  EXPECT_EQ(c->kv_dim(), 32);
  EXPECT_FALSE(c->bias);
  EXPECT_EQ(c->gelu, Gelu::kTanh);
  EXPECT_EQ(c->weight_layout, kernels::WeightLayout::kInOut);
  EXPECT_FLOAT_EQ(c->layer_norm_eps, 1e-6f);
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kChar);
  EXPECT_EQ(c->tokenizer.vocab, fs::path("/models/char/vocab.json"));
}

TEST(ModelConfigTest, NanoGptBpeTokenizer) {
  json j = nanogpt_json();
  j["tokenizer"] = {{"type", "bpe"}, {"encoder", "encoder.json"}, {"merges", "vocab.bpe"}};
  auto c = parse(j, "/m");
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kBpe);
  EXPECT_EQ(c->tokenizer.vocab, fs::path("/m/encoder.json"));
  EXPECT_EQ(c->tokenizer.merges, fs::path("/m/vocab.bpe"));
}

TEST(ModelConfigTest, NanoGptTiktokenTokenizer) {
  json j = nanogpt_json();
  j["tokenizer"] = {{"type", "tiktoken"},
                    {"ranks", "tokenizer.tiktoken"},
                    {"pattern", "\\S+|\\s+"},
                    {"special_tokens", {{"<|bos|>", 256}, {"<|user_start|>", 257}}}};
  auto c = parse(j, "/m");
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kTiktoken);
  EXPECT_EQ(c->tokenizer.vocab, fs::path("/m/tokenizer.tiktoken"));
  EXPECT_EQ(c->tokenizer.pattern, "\\S+|\\s+");
  ASSERT_EQ(c->tokenizer.special_tokens.size(), 2u);
  EXPECT_EQ(c->tokenizer.special_tokens[0].text, "<|bos|>");
  EXPECT_EQ(c->tokenizer.special_tokens[0].id, 256);

  const std::pair<json, std::string> bad[] = {
      {{{"type", "tiktoken"}, {"pattern", "x"}}, "\"tokenizer.ranks\" must be a non-empty string"},
      {{{"type", "tiktoken"}, {"ranks", "r"}}, "\"tokenizer.pattern\" must be a non-empty string"},
      {{{"type", "tiktoken"}, {"ranks", "r"}, {"pattern", std::string(4097, 'x')}},
       "at most 4096 bytes"},
      {{{"type", "tiktoken"}, {"ranks", "r"}, {"pattern", "x"}, {"special_tokens", {1, 2}}},
       "\"tokenizer.special_tokens\" must be an object"},
      {{{"type", "tiktoken"},
        {"ranks", "r"},
        {"pattern", "x"},
        {"special_tokens", {{"<|a|>", -1}}}},
       "\"<|a|>\" must have an integer id in [0, 2^24), got -1"},
      {{{"type", "tiktoken"},
        {"ranks", "r"},
        {"pattern", "x"},
        {"special_tokens", {{"<|a|>", "1"}}}},
       "got \"1\""},
      {{{"type", "sentencepiece"}}, "must be \"char\", \"bpe\" or \"tiktoken\""},
  };
  for (const auto& [tokenizer, error] : bad) {
    j["tokenizer"] = tokenizer;
    auto refused = parse(j, "/m");
    ASSERT_FALSE(refused.has_value()) << error;
    EXPECT_NE(refused.error().find(error), std::string::npos) << refused.error();
  }
}

TEST(ModelConfigTest, HuggingFaceDefaults) {
  auto c = parse(hf_json());
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->n_layer, 12);
  EXPECT_EQ(c->n_kv_head, 12);
  EXPECT_EQ(c->block_size, 1024);
  EXPECT_TRUE(c->bias);
  EXPECT_EQ(c->gelu, Gelu::kTanh);  // gelu_new is GPT2Config's default
  EXPECT_EQ(c->weight_layout, kernels::WeightLayout::kInOut);
  EXPECT_FLOAT_EQ(c->layer_norm_eps, 1e-5f);
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kNone);
}

TEST(ModelConfigTest, HuggingFaceKeys) {
  json j = hf_json();
  j["activation_function"] = "gelu";
  j["layer_norm_epsilon"] = 2e-5;
  j["n_inner"] = nullptr;
  j["tie_word_embeddings"] = true;
  j["weight_layout"] = "out_in";  // not a Hugging Face key: Conv1D is always in_out
  auto c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->gelu, Gelu::kErf);
  EXPECT_FLOAT_EQ(c->layer_norm_eps, 2e-5f);
  EXPECT_EQ(c->weight_layout, kernels::WeightLayout::kInOut);

  j["activation_function"] = "gelu_new";
  j["n_inner"] = 4 * 768;
  c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->gelu, Gelu::kTanh);
}

TEST(ModelConfigTest, HuggingFaceRejectsWhatGpt2CannotRun) {
  json j = hf_json();
  j["activation_function"] = "relu";
  expect_error(j, "activation_function");
  j = hf_json();
  j["n_inner"] = 1000;
  expect_error(j, "n_inner");
  j = hf_json();
  j["tie_word_embeddings"] = false;
  expect_error(j, "tie_word_embeddings");
  j = hf_json();
  j["model_type"] = "llama";
  expect_error(j, "model_type");
}

TEST(ModelConfigTest, HuggingFaceFindsBpeFilesBesideConfig) {
  TempDir dir;
  auto without = parse(hf_json(), dir.path());
  ASSERT_TRUE(without.has_value()) << without.error();
  EXPECT_EQ(without->tokenizer.type, TokenizerSpec::Type::kNone);

  dir.write("encoder.json", "{}");
  auto half = parse(hf_json(), dir.path());
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->tokenizer.type, TokenizerSpec::Type::kNone) << "needs both files";

  dir.write("vocab.bpe", "#version: 0.2\n");
  auto with = parse(hf_json(), dir.path());
  ASSERT_TRUE(with.has_value()) << with.error();
  EXPECT_EQ(with->tokenizer.type, TokenizerSpec::Type::kBpe);
  EXPECT_EQ(with->tokenizer.vocab, dir.path() / "encoder.json");
  EXPECT_EQ(with->tokenizer.merges, dir.path() / "vocab.bpe");
}

// Each set of files a folder may hold, alone, in both dialects.
TEST(ModelConfigTest, DetectsEachTokenizerLayoutInBothDialects) {
  struct Layout {
    std::vector<std::string> files;
    TokenizerSpec::Type type;
    std::string vocab, merges;  // expected file names; empty: none
  };
  const Layout layouts[] = {
      {{"encoder.json", "vocab.bpe"}, TokenizerSpec::Type::kBpe, "encoder.json", "vocab.bpe"},
      {{"vocab.json", "merges.txt"}, TokenizerSpec::Type::kBpe, "vocab.json", "merges.txt"},
      {{"tokenizer.json"}, TokenizerSpec::Type::kBpeTokenizerJson, "tokenizer.json", ""},
      // A lone vocab.json may be a char vocabulary: nothing is guessed.
      {{"vocab.json"}, TokenizerSpec::Type::kNone, "", ""},
      {{"merges.txt"}, TokenizerSpec::Type::kNone, "", ""},
  };
  for (const json& config : {nanogpt_json(), hf_json()}) {
    for (const Layout& layout : layouts) {
      TempDir dir;
      for (const std::string& file : layout.files) dir.write(file, "{}");
      SCOPED_TRACE(config.dump() + " with " + json(layout.files).dump());
      auto c = parse(config, dir.path());
      ASSERT_TRUE(c.has_value()) << c.error();
      EXPECT_EQ(c->tokenizer.type, layout.type);
      EXPECT_EQ(c->tokenizer.vocab, layout.vocab.empty() ? fs::path() : dir.path() / layout.vocab);
      EXPECT_EQ(c->tokenizer.merges,
                layout.merges.empty() ? fs::path() : dir.path() / layout.merges);
    }
  }
}

TEST(ModelConfigTest, DetectionPrefersOpenAiNamesThenPairsThenTokenizerJson) {
  TempDir dir;
  for (const char* file : {"tokenizer.json", "vocab.json", "merges.txt"}) dir.write(file, "{}");
  auto c = parse(hf_json(), dir.path());
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kBpe);
  EXPECT_EQ(c->tokenizer.vocab, dir.path() / "vocab.json");

  for (const char* file : {"encoder.json", "vocab.bpe"}) dir.write(file, "{}");
  c = parse(hf_json(), dir.path());
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->tokenizer.vocab, dir.path() / "encoder.json");
  EXPECT_EQ(c->tokenizer.merges, dir.path() / "vocab.bpe");
}

// models/fortunes-char keeps a char vocab.json; its config's entry must win
// over any BPE files that happen to sit beside it.
TEST(ModelConfigTest, AnExplicitTokenizerAlwaysWins) {
  TempDir dir;
  for (const char* file : {"vocab.json", "merges.txt", "tokenizer.json"}) dir.write(file, "{}");
  json j = nanogpt_json();
  j["tokenizer"] = {{"type", "char"}, {"vocab", "vocab.json"}};
  auto c = parse(j, dir.path());
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->tokenizer.type, TokenizerSpec::Type::kChar);
  EXPECT_EQ(c->tokenizer.vocab, dir.path() / "vocab.json");

  auto bundled =
      ModelConfig::load(fs::path(KVTIER_SOURCE_DIR) / "models" / "fortunes-char" / "config.json");
  ASSERT_TRUE(bundled.has_value()) << bundled.error();
  EXPECT_EQ(bundled->tokenizer.type, TokenizerSpec::Type::kChar);
}

TEST(ModelConfigTest, RejectsNonJsonAndNonObjects) {
  auto c = ModelConfig::parse("{\"format\": \"nanogpt\",", "/m");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().find("not valid JSON"), std::string::npos) << c.error();
  c = ModelConfig::parse("", "/m");
  ASSERT_FALSE(c.has_value());
  c = ModelConfig::parse("[1, 2]", "/m");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().find("not an object"), std::string::npos) << c.error();
}

TEST(ModelConfigTest, DescribesNestedValuesWithoutDumpingThem) {
  const int depth = 100000;
  const std::string text = "{\"format\": \"nanogpt\", \"n_layer\": " + std::string(depth, '[') +
                           std::string(depth, ']') + "}";
  auto c = ModelConfig::parse(text, "/m");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error(), "key \"n_layer\" must be an integer, got a JSON array");
}

TEST(ModelConfigTest, RejectsUnknownDialect) {
  expect_error(json{{"n_layer", 1}}, "nanogpt");
  json j = nanogpt_json();
  j["format"] = "ggml";
  expect_error(j, "format");
  j["format"] = 3;
  expect_error(j, "format");
}

TEST(ModelConfigTest, RejectsMissingRequiredKeys) {
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "block_size", "gelu"}) {
    json j = nanogpt_json();
    j.erase(key);
    SCOPED_TRACE(key);
    expect_error(j, key);
  }
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"}) {
    json j = hf_json();
    j.erase(key);
    SCOPED_TRACE(key);
    expect_error(j, key);
  }
}

TEST(ModelConfigTest, RejectsNonIntegerSizes) {
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "block_size", "n_kv_head"}) {
    for (const json& bad : {json(4.0), json("4"), json(true), json::array({4}), json(nullptr)}) {
      if (std::string(key) == "n_kv_head" && bad.is_null()) continue;  // optional: null = absent
      json j = nanogpt_json();
      j[key] = bad;
      SCOPED_TRACE(std::string(key) + " = " + bad.dump());
      expect_error(j, key);
    }
  }
}

TEST(ModelConfigTest, RejectsNonPositiveSizes) {
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "block_size", "n_kv_head"}) {
    for (int bad : {0, -1, -2147483647}) {
      json j = nanogpt_json();
      j[key] = bad;
      SCOPED_TRACE(std::string(key) + " = " + std::to_string(bad));
      expect_error(j, key);
    }
  }
}

TEST(ModelConfigTest, RejectsSizesAboveLimits) {
  struct Case {
    const char* key;
    std::int64_t first_bad;
  };
  for (const Case& c : {Case{"n_layer", 1025}, Case{"n_embd", 65537},
                        Case{"vocab_size", (1 << 24) + 1}, Case{"block_size", (1 << 20) + 1}}) {
    SCOPED_TRACE(c.key);
    json j = nanogpt_json();
    j[c.key] = c.first_bad;
    expect_error(j, c.key);
    j[c.key] = std::uint64_t{18446744073709551615u};  // would wrap if read as int64
    expect_error(j, c.key);
    j[c.key] = std::int64_t{1} << 40;  // would truncate if read as int
    expect_error(j, c.key);
  }
  json j = nanogpt_json();
  j["n_layer"] = 1024;  // the limits themselves are allowed
  j["block_size"] = 1 << 20;
  j["vocab_size"] = 1 << 24;
  EXPECT_TRUE(parse(j).has_value());
  j = hf_json();
  j["n_positions"] = (1 << 20) + 1;
  expect_error(j, "n_positions");
}

TEST(ModelConfigTest, RejectsHeadsThatDoNotDivide) {
  json j = nanogpt_json();
  j["n_head"] = 5;  // 64 % 5 != 0
  expect_error(j, "n_embd");
  j = nanogpt_json();
  j["n_kv_head"] = 3;  // 4 % 3 != 0
  expect_error(j, "n_kv_head");
  j["n_kv_head"] = 8;  // more KV heads than heads
  expect_error(j, "n_kv_head");
  j["n_kv_head"] = 1;  // multi-query is a valid config (weights then refuse it)
  EXPECT_TRUE(parse(j).has_value());
}

TEST(ModelConfigTest, RejectsUnknownStrings) {
  json j = nanogpt_json();
  j["gelu"] = "gelu_new";
  expect_error(j, "gelu");
  j["gelu"] = 1;
  expect_error(j, "gelu");
  j = nanogpt_json();
  j["weight_layout"] = "row_major";
  expect_error(j, "weight_layout");
  j["weight_layout"] = false;
  expect_error(j, "weight_layout");
  j = nanogpt_json();
  j["bias"] = "false";
  expect_error(j, "bias");
  j["bias"] = 0;
  expect_error(j, "bias");
}

TEST(ModelConfigTest, RejectsBadEpsilon) {
  for (const json& bad : {json(0.0), json(-1e-5), json(1e-50), json(1.5), json("1e-5")}) {
    SCOPED_TRACE(bad.dump());
    json j = nanogpt_json();
    j["layer_norm_eps"] = bad;
    expect_error(j, "layer_norm_eps");
    j = hf_json();
    j["layer_norm_epsilon"] = bad;
    expect_error(j, "layer_norm_epsilon");
  }
  json j = nanogpt_json();
  j["layer_norm_eps"] = 1;  // an integer is a number too, but not below 1
  expect_error(j, "layer_norm_eps");
}

TEST(ModelConfigTest, RejectsBadTokenizer) {
  const json bad_tokenizers[] = {
      json("char"),
      json::object(),
      json{{"type", "sentencepiece"}, {"model", "x.model"}},
      json{{"type", "char"}},
      json{{"type", "char"}, {"vocab", ""}},
      json{{"type", "char"}, {"vocab", 3}},
      json{{"type", "bpe"}, {"encoder", "encoder.json"}},
      json{{"type", "bpe"}, {"merges", "vocab.bpe"}},
  };
  for (const json& tok : bad_tokenizers) {
    SCOPED_TRACE(tok.dump());
    json j = nanogpt_json();
    j["tokenizer"] = tok;
    expect_error(j, "tokenizer");
  }
}

TEST(ModelConfigTest, LoadResolvesTokenizerAgainstConfigFolder) {
  TempDir dir;
  json j = nanogpt_json();
  j["tokenizer"] = {{"type", "char"}, {"vocab", "vocab.json"}};
  const fs::path path = dir.write("config.json", j.dump(2));
  auto c = ModelConfig::load(path);
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->tokenizer.vocab, dir.path() / "vocab.json");
  EXPECT_EQ(c->n_embd, 64);
}

TEST(ModelConfigTest, LoadErrorsNameTheFile) {
  TempDir dir;
  auto missing = ModelConfig::load(dir.path() / "nope.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().find("nope.json"), std::string::npos) << missing.error();

  auto directory = ModelConfig::load(dir.path());
  ASSERT_FALSE(directory.has_value());

  json j = nanogpt_json();
  j.erase("gelu");
  const fs::path path = dir.write("config.json", j.dump());
  auto bad = ModelConfig::load(path);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().find(path.string()), std::string::npos) << bad.error();
  EXPECT_NE(bad.error().find("gelu"), std::string::npos) << bad.error();
}

TEST(ModelConfigTest, Gpt2_124mShapes) {
  const ModelConfig c = ModelConfig::gpt2_124m();
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.n_kv_head, 12);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.block_size, 1024);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_TRUE(c.bias);
  EXPECT_EQ(c.gelu, Gelu::kTanh);
  EXPECT_EQ(c.weight_layout, kernels::WeightLayout::kInOut);
  // The same shapes as Hugging Face's gpt2 config.json.
  auto hf = parse(hf_json());
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->n_embd, c.n_embd);
  EXPECT_EQ(hf->gelu, c.gelu);
  EXPECT_EQ(hf->weight_layout, c.weight_layout);
}

}  // namespace
}  // namespace kvtier

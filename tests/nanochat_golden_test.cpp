// models/fortunes-chat, the bundled nanochat chat model, against the
// PyTorch model it was trained as (scripts/train_nanochat.py --golden wrote
// golden.json, cross-checked there against tests/nanochat_reference.py):
// the prompt's ids from our tokenizer (special tokens where the chat format
// puts them, the text between encoded as ordinary text), the last prompt
// position's five largest logits within 1e-4, and the greedy continuation
// token for token. Then kvtierd itself: a conversation on
// /v1/chat/completions answers what the trained model answers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon_test_util.h"
#include "engine/model/generator.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "http_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;

const std::filesystem::path kDir =
    std::filesystem::path(KVTIER_SOURCE_DIR) / "models/fortunes-chat";

json golden() {
  std::ifstream in(kDir / "golden.json");
  return json::parse(in, nullptr, false);
}

// `text` as the front doors encode it: each special token's marker as that
// token, the text between as ordinary text.
std::vector<int> encode_marked(const Tokenizer& tokenizer, const TokenizerSpec& spec,
                               std::string_view text) {
  std::vector<int> ids;
  while (!text.empty()) {
    std::size_t at = text.size();
    const SpecialToken* next = nullptr;
    for (const SpecialToken& s : spec.special_tokens) {
      const std::size_t found = text.find(s.text);
      if (found < at) at = found, next = &s;
    }
    const auto piece = tokenizer.encode(text.substr(0, at));
    EXPECT_TRUE(piece.has_value());
    if (piece) ids.insert(ids.end(), piece->begin(), piece->end());
    if (next == nullptr) break;
    ids.push_back(next->id);
    text.remove_prefix(at + next->text.size());
  }
  return ids;
}

TEST(NanochatGoldenTest, TheBundledChatModelComputesWhatPyTorchDoes) {
  const json g = golden();
  ASSERT_FALSE(g.is_discarded()) << "missing or bad " << (kDir / "golden.json");
  ASSERT_EQ(g.at("version"), 1);
  auto model = Model::load(kDir);
  ASSERT_TRUE(model.has_value()) << model.error();
  EXPECT_EQ((*model)->family(), "nanochat");
  const TokenizerSpec& spec = (*model)->config().tokenizer;
  auto tokenizer = Tokenizer::load(spec);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.error();
  const int V = (*model)->config().vocab_size;
  tiers::BlockPool pool((*model)->kv_layout(16).block_bytes(), 24);

  ASSERT_GE(g.at("cases").size(), 4u);
  for (const json& c : g.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto prompt = c.at("prompt_tokens").get<std::vector<int>>();
    EXPECT_EQ(encode_marked(**tokenizer, spec, c.at("prompt").get<std::string>()), prompt);

    SequenceKv kv(16);
    ASSERT_TRUE(kv.reserve(pool, static_cast<int>(prompt.size())));
    const Model::Chunk chunk{&kv, prompt};
    auto logits = (*model)->forward(std::span(&chunk, 1), pool);
    ASSERT_TRUE(logits.has_value()) << logits.error();
    ASSERT_EQ(static_cast<int>(logits->size()), V);
    for (const json& top : c.at("top5")) {
      const int id = top.at(0).get<int>();
      EXPECT_NEAR((*logits)[id], top.at(1).get<float>(), 1e-4f) << "token " << id;
    }
    kv.release(pool);

    const auto want = c.at("greedy_tokens").get<std::vector<int>>();
    GenerateOptions o;
    o.sampling = {0.0f, 0, 1.0f, 0};  // greedy
    o.max_tokens = static_cast<int>(want.size());
    o.stop_token_ids = g.at("stop_tokens").get<std::vector<int>>();
    o.tools = false;  // the trained model's own tokens
    auto out = generate(**model, pool, tokenizer->get(), prompt, o);
    ASSERT_TRUE(out.has_value()) << out.error();
    EXPECT_EQ(out->tokens, want);
  }
}

TEST(NanochatGoldenTest, KvtierdAnswersAConversationAsTheTrainedModelDoes) {
  const json g = golden();
  ASSERT_FALSE(g.is_discarded());
  const json* chicken = nullptr;
  for (const json& c : g.at("cases"))
    if (c.at("name") == "chat_chicken") chicken = &c;
  ASSERT_NE(chicken, nullptr);
  std::string want = chicken->at("greedy_text").get<std::string>();
  ASSERT_TRUE(want.ends_with("<|assistant_end|>"));
  want.resize(want.size() - std::string_view("<|assistant_end|>").size());

  daemon_test::Daemon d({"--model", kDir.string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  test_util::TempDir dir;
  const test_util::HttpAnswer a = test_util::curl(
      d.socket_path(), dir.path(), "POST", "/v1/chat/completions",
      json{{"messages", {{{"role", "user"}, {"content", "Why did the chicken cross the road?"}}}},
           {"temperature", 0}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.doc()["choices"][0]["message"]["content"], want) << a.body;
  EXPECT_EQ(a.doc()["choices"][0]["finish_reason"], "stop") << a.body;
}

}  // namespace
}  // namespace kvtier

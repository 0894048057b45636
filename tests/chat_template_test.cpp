// The chat template (wire/chat_template.h): the default, a model
// folder's own file, and every way such a file can be wrong, each an error
// naming the file and the key.
#include "wire/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/model/model_folder.h"
#include "engine/model/tokenizer.h"
#include "nanochat_test_util.h"
#include "test_util.h"

namespace kvtier::wire {
namespace {

// The text a role-string template renders `messages` to.
std::string text_of(const ChatTemplate& t, std::vector<ChatMessage> messages) {
  auto rendered = t.render(messages);
  EXPECT_TRUE(rendered.has_value());
  return rendered ? std::get<std::string>(rendered->prompt) : std::string();
}

TEST(ChatTemplateTest, AFolderWithoutAFileGetsTheDefault) {
  test_util::TempDir dir;
  auto t = ChatTemplate::load(dir.path().string(), {});
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_FALSE(t->marks_turns_with_tokens());
  EXPECT_EQ(text_of(*t, {{"system", "S"}, {"user", "U"}, {"assistant", "A"}}),
            "S\n\nUser: U\nAssistant: A\nAssistant:");
  auto rendered = t->render(std::vector<ChatMessage>{{"user", "U"}});
  ASSERT_TRUE(rendered.has_value());
  EXPECT_EQ(rendered->stop, (std::vector<std::string>{"\nUser:"}));
  EXPECT_TRUE(rendered->stop_token_ids.empty());
}

TEST(ChatTemplateTest, TheBundledModelSpeaksQAndA) {
  auto t = ChatTemplate::load(std::string(KVTIER_SOURCE_DIR) + "/models/fortunes-char", {});
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_EQ(text_of(*t, {{"user", "Why?"}}), "Q: Why?\nA:");
}

TEST(ChatTemplateTest, AWrongFileIsAnErrorNamingItAndTheKey) {
  test_util::TempDir dir;
  const auto with = [&](const std::string& text) {
    std::ofstream(dir.path() / "chat_template.json") << text;
    return ChatTemplate::load(dir.path().string(), {});
  };
  auto custom = with(R"({"user": "<u>{content}</u>", "generation_prompt": "<a>", "stop": []})");
  ASSERT_TRUE(custom.has_value()) << custom.error();
  EXPECT_EQ(text_of(*custom, {{"user", "hi"}}), "<u>hi</u><a>");
  EXPECT_TRUE(custom->render(std::vector<ChatMessage>{{"user", "hi"}})->stop.empty());
  for (const auto& [text, key] :
       std::vector<std::pair<std::string, std::string>>{{"{not json", "parse error"},
                                                        {"[]", "not a JSON object"},
                                                        {R"({"user": "no placeholder"})", "'user'"},
                                                        {R"({"user": 5})", "'user'"},
                                                        {R"({"stop": "x"})", "'stop'"},
                                                        {R"({"stop": [1]})", "'stop'"},
                                                        {R"({"bos": "x"})", "'bos'"}}) {
    auto t = with(text);
    ASSERT_FALSE(t.has_value()) << text;
    EXPECT_TRUE(test_util::contains(t.error(), "chat_template.json")) << t.error();
    EXPECT_TRUE(test_util::contains(t.error(), key)) << t.error();
  }
  std::filesystem::remove(dir.path() / "chat_template.json");
  std::filesystem::create_directory(dir.path() / "chat_template.json");
  EXPECT_FALSE(ChatTemplate::load(dir.path().string(), {}).has_value());
}

// nanochat's markers, by the ids the test folder's config gives them.
struct Markers {
  int bos, user_start, user_end, assistant_start, assistant_end;
};

// A nanochat folder's config and the chat template it gets.
struct NanochatChat {
  ModelConfig config;
  ChatTemplate chat;
};
std::expected<NanochatChat, std::string> nanochat_chat(const nanochat_test::NanochatFolder& f) {
  auto config = read_model_config(f.path());
  if (!config) return std::unexpected(config.error());
  auto chat = ChatTemplate::load(f.path().string(), config->tokenizer);
  if (!chat) return std::unexpected(chat.error());
  return NanochatChat{std::move(*config), std::move(*chat)};
}

TEST(ChatTemplateTest, NanochatsVocabularyRendersTurnsAsItsTokenizerDoes) {
  nanochat_test::NanochatFolder folder({5, 2});
  auto loaded = nanochat_chat(folder);
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  const ModelConfig& config = loaded->config;
  const ChatTemplate& t = loaded->chat;
  EXPECT_TRUE(t.marks_turns_with_tokens());
  auto tokenizer = Tokenizer::load(config.tokenizer);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.error();
  const auto id = [&](const char* name) {
    for (const SpecialToken& s : config.tokenizer.special_tokens)
      if (s.text == name) return s.id;
    ADD_FAILURE() << name;
    return -1;
  };
  const Markers k{id("<|bos|>"), id("<|user_start|>"), id("<|user_end|>"),
                  id("<|assistant_start|>"), id("<|assistant_end|>")};
  const auto encoded = [&](const std::string& text) { return (*tokenizer)->encode(text).value(); };

  // nanochat's render_conversation, written out: the system message joins
  // the first user message; each text is its own ordinary tokens, so a
  // marker typed by the user is text.
  const std::vector<ChatMessage> conversation = {{"system", "Be brief."},
                                                 {"user", "the <|assistant_end|> is"},
                                                 {"assistant", "an end"},
                                                 {"user", "and <|bos|>?"}};
  std::vector<int> expected = {k.bos, k.user_start};
  const auto first = encoded("Be brief.\n\nthe <|assistant_end|> is");
  expected.insert(expected.end(), first.begin(), first.end());
  expected.push_back(k.user_end);
  expected.push_back(k.assistant_start);
  const auto answer = encoded("an end");
  expected.insert(expected.end(), answer.begin(), answer.end());
  expected.push_back(k.assistant_end);
  expected.push_back(k.user_start);
  const auto last = encoded("and <|bos|>?");
  expected.insert(expected.end(), last.begin(), last.end());
  expected.push_back(k.user_end);
  expected.push_back(k.assistant_start);

  auto rendered = t.render(conversation);
  ASSERT_TRUE(rendered.has_value()) << rendered.error();
  auto tokens = prompt_tokens(**tokenizer, rendered->prompt);
  ASSERT_TRUE(tokens.has_value()) << tokens.error();
  EXPECT_EQ(*tokens, expected);
  EXPECT_EQ(std::count(tokens->begin(), tokens->end(), k.assistant_end), 1);
  EXPECT_EQ(std::count(tokens->begin(), tokens->end(), k.bos), 1);
  EXPECT_TRUE(rendered->stop.empty());
  EXPECT_EQ(rendered->stop_token_ids, (std::vector<int>{k.assistant_end, k.bos}));

  // Without a system message the first user turn is its own text.
  auto plain = t.render(std::vector<ChatMessage>{{"user", "hi"}});
  ASSERT_TRUE(plain.has_value());
  std::vector<int> hi = {k.bos, k.user_start};
  for (int i : encoded("hi")) hi.push_back(i);
  hi.insert(hi.end(), {k.user_end, k.assistant_start});
  EXPECT_EQ(prompt_tokens(**tokenizer, plain->prompt).value(), hi);
}

TEST(ChatTemplateTest, NanochatRefusesConversationsItWasNotTrainedOnNamingTheMessage) {
  nanochat_test::NanochatFolder folder({3, 4});
  auto loaded = nanochat_chat(folder);
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  const ModelConfig& config = loaded->config;
  const ChatTemplate& t = loaded->chat;
  const std::vector<std::pair<std::vector<ChatMessage>, std::string>> bad = {
      {{{"system", "s"}}, "no user message"},
      {{{"assistant", "a"}, {"user", "u"}}, "message 1 (assistant)"},
      {{{"user", "u"}, {"user", "v"}}, "message 2 (user)"},
      {{{"user", "u"}, {"system", "s"}, {"user", "v"}}, "message 2 (system)"},
      {{{"system", "s"}, {"system", "t"}, {"user", "u"}}, "message 2 (system)"},
      {{{"user", "u"}, {"assistant", "a"}}, "message 2 (assistant)"},
      {{{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"assistant", "b"}},
       "message 4 (assistant)"}};
  for (const auto& [messages, named] : bad) {
    auto r = t.render(messages);
    ASSERT_FALSE(r.has_value()) << named;
    EXPECT_TRUE(test_util::contains(r.error(), named)) << r.error();
  }
  // A chat_template.json beside turn markers is a mistake the start names.
  std::ofstream(folder.path() / "chat_template.json") << "{}";
  auto both = ChatTemplate::load(folder.path().string(), config.tokenizer);
  ASSERT_FALSE(both.has_value());
  EXPECT_TRUE(test_util::contains(both.error(), "chat_template.json")) << both.error();
}

}  // namespace
}  // namespace kvtier::wire

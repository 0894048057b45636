// The OpenAI request bodies (wire/http/completion_params.h), checked
// without a daemon: defaults, every form of prompt, extensions, and each
// refusal naming its field with the status OpenAI's clients expect.
#include "wire/http/completion_params.h"

#include <gtest/gtest.h>

namespace kvtier::wire::http {
namespace {

using nlohmann::json;

TEST(CompletionParamsTest, DefaultsAreOpenAis) {
  auto spec = completion_spec(json{{"prompt", "hi"}}, "m");
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->api, Api::kCompletions);
  EXPECT_EQ(spec->params.max_tokens, 16);
  EXPECT_EQ(spec->params.sampling.temperature, 1.0f);
  EXPECT_EQ(spec->params.sampling.top_p, 1.0f);
  EXPECT_EQ(spec->params.n, 1);
  EXPECT_FALSE(spec->stream);
  ASSERT_EQ(spec->prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(spec->prompts[0]), "hi");
}

TEST(CompletionParamsTest, EveryFormOfPromptAndTheExtensions) {
  auto ids = completion_spec(json{{"prompt", {1, 2, 3}}}, "m");
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(std::get<std::vector<int>>(ids->prompts[0]), (std::vector<int>{1, 2, 3}));
  auto texts = completion_spec(json{{"prompt", {"a", "b"}}}, "m");
  ASSERT_TRUE(texts.has_value());
  EXPECT_EQ(texts->prompts.size(), 2u);
  auto lists = completion_spec(json{{"prompt", {{1}, {2, 3}}}}, "m");
  ASSERT_TRUE(lists.has_value());
  EXPECT_EQ(std::get<std::vector<int>>(lists->prompts[1]), (std::vector<int>{2, 3}));

  auto all = completion_spec(json{{"model", "m"},
                                  {"prompt", "x"},
                                  {"max_tokens", 5},
                                  {"temperature", 0},
                                  {"top_p", 0.5},
                                  {"top_k", -1},
                                  {"n", 3},
                                  {"stop", "\n"},
                                  {"seed", -1},
                                  {"stream", true},
                                  {"stream_options", {{"include_usage", true}}},
                                  {"echo", false},
                                  {"cache_salt", "tenant"},
                                  {"priority", 2},
                                  {"user", "u"},
                                  {"presence_penalty", 0},
                                  {"logit_bias", json::object()},
                                  {"best_of", 1},
                                  {"suffix", nullptr},
                                  {"logprobs", 3},
                                  {"ignore_eos", true}},
                             "m");
  ASSERT_TRUE(all.has_value()) << all.error().message;
  EXPECT_EQ(all->params.max_tokens, 5);
  EXPECT_EQ(all->params.sampling.top_k, 0);
  EXPECT_EQ(all->params.sampling.seed, ~std::uint64_t{0});  // -1 as two's complement
  EXPECT_EQ(all->params.stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(all->include_usage);
  EXPECT_TRUE(all->echo.empty());
  auto echo = completion_spec(json{{"prompt", "x"}, {"echo", true}}, "m");
  ASSERT_TRUE(echo.has_value());
  EXPECT_EQ(echo->echo, (std::vector<std::string>{"x"}));
  EXPECT_EQ(all->params.cache_salt, "tenant");
  EXPECT_EQ(all->params.priority, 2);
  EXPECT_EQ(all->params.logprobs, 3);
  EXPECT_TRUE(all->params.ignore_eos);
  EXPECT_EQ(completion_spec(json{{"prompt", "x"}}, "m")->params.logprobs, -1);
}

TEST(CompletionParamsTest, RefusalsNameTheFieldAndTheStatus) {
  const auto refused = [](const json& body) {
    auto spec = completion_spec(body, "m");
    EXPECT_FALSE(spec.has_value()) << body.dump();
    return spec ? ParamError{} : spec.error();
  };
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"temperature", -0.5}}).param, "temperature");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"top_p", 0}}).param, "top_p");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"max_tokens", 0}}).param, "max_tokens");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"n", "2"}}).param, "n");
  EXPECT_EQ(refused(json{{"prompt", json::array()}}).param, "prompt");
  EXPECT_EQ(refused(json{{"prompt", {1, "a"}}}).param, "prompt");
  EXPECT_EQ(refused(json{{"prompt", {{1}, 2}}}).param, "prompt");
  EXPECT_EQ(refused(json{{"max_tokens", 1}}).param, "prompt");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"presence_penalty", 0.5}}).param, "presence_penalty");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"logit_bias", {{"1", 5}}}}).param, "logit_bias");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"best_of", 3}}).param, "best_of");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}).param,
            "stream_options");
  EXPECT_EQ(refused(json{{"prompt", {1, 2}}, {"echo", true}}).param, "echo");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"echo", true}, {"logprobs", 1}}).param, "echo");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"logprobs", 21}}).param, "logprobs");
  EXPECT_EQ(refused(json{{"prompt", "x"}, {"cache_salt", std::string(300, 's')}}).param,
            "cache_salt");
  const ParamError unknown = refused(json{{"prompt", "x"}, {"foo", 1}});
  EXPECT_EQ(unknown.param, "foo");
  EXPECT_EQ(unknown.status, 400);
  const ParamError model = refused(json{{"prompt", "x"}, {"model", "other"}});
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.code, "model_not_found");
  EXPECT_EQ(refused(json::array()).status, 400);
}

TEST(CompletionParamsTest, ChatRendersTheTemplateAndAddsItsStops) {
  ChatTemplate t;
  auto spec = chat_spec(
      json{{"messages",
            {{{"role", "developer"}, {"content", "Rules."}},
             {{"role", "user"},
              {"content",
               {{{"type", "text"}, {"text", "Hi"}}, {{"type", "text"}, {"text", " there"}}}}},
             {{"role", "assistant"}, {"content", "Hello."}},
             {{"role", "user"}, {"content", "Bye"}}}},
           {"stop", {"X"}},
           {"max_completion_tokens", 7}},
      "m", t, 256);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->api, Api::kChat);
  EXPECT_EQ(std::get<std::string>(spec->prompts[0]),
            "Rules.\n\nUser: Hi there\nAssistant: Hello.\nUser: Bye\nAssistant:");
  EXPECT_EQ(spec->params.stop, (std::vector<std::string>{"X", "\nUser:"}));
  EXPECT_EQ(spec->params.max_tokens, 7);
  auto unbounded =
      chat_spec(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}}, "m", t, 256);
  ASSERT_TRUE(unbounded.has_value());
  EXPECT_EQ(unbounded->params.max_tokens, 256);  // the context ends it
  EXPECT_EQ(unbounded->params.logprobs, -1);
  const json one = {{"role", "user"}, {"content", "x"}};
  auto logprobs =
      chat_spec(json{{"messages", {one}}, {"logprobs", true}, {"top_logprobs", 4}}, "m", t, 256);
  ASSERT_TRUE(logprobs.has_value());
  EXPECT_EQ(logprobs->params.logprobs, 4);
  EXPECT_EQ(chat_spec(json{{"messages", {one}}, {"logprobs", true}}, "m", t, 256)->params.logprobs,
            0);

  for (const json& bad :
       {json{{"messages", json::array()}},
        json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}},
        json{{"messages", {{{"content", "x"}}}}},
        json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
        json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", {{{"x", 1}}}}},
        json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"prompt", "x"}},
        json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}}) {
    auto r = chat_spec(bad, "m", t, 256);
    EXPECT_FALSE(r.has_value()) << bad.dump();
  }
}

}  // namespace
}  // namespace kvtier::wire::http

// ToolUse: nanochat's tool protocol on its own tokenizer (the markers the
// test folder's vocabulary has, as nanochat's): an expression between
// <|python_start|> and <|python_end|> is answered with
// <|output_start|>result<|output_end|>, one forced token at a time; what
// the calculator refuses forces nothing; the state is the request's own.
#include "engine/model/tool_use.h"

#include <gtest/gtest.h>

#include "engine/model/model.h"
#include "nanochat_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

class ToolUseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(folder_.path());
    ASSERT_TRUE(model.has_value()) << model.error();
    spec_ = (*model)->config().tokenizer;
    auto tokenizer = Tokenizer::load(spec_);
    ASSERT_TRUE(tokenizer.has_value()) << tokenizer.error();
    tokenizer_ = std::move(*tokenizer);
    for (const SpecialToken& s : spec_.special_tokens) ids_[s.text] = s.id;
  }

  std::vector<int> encode(std::string_view text) const { return *tokenizer_->encode(text); }

  // Feeds the model's call of `expression` and returns what is forced after it.
  std::vector<int> call(ToolUse& tools, std::string_view expression) {
    tools.observe(ids_["<|python_start|>"], *tokenizer_);
    for (int t : encode(expression)) tools.observe(t, *tokenizer_);
    tools.observe(ids_["<|python_end|>"], *tokenizer_);
    return drain(tools);
  }

  // Takes every forced token, observing each as the scheduler does.
  std::vector<int> drain(ToolUse& tools) {
    std::vector<int> out;
    while (auto t = tools.take_forced()) {
      tools.observe(*t, *tokenizer_);
      out.push_back(*t);
    }
    return out;
  }

  std::vector<int> answer(std::string_view result) {
    std::vector<int> out = {ids_["<|output_start|>"]};
    for (int t : encode(result)) out.push_back(t);
    out.push_back(ids_["<|output_end|>"]);
    return out;
  }

  nanochat_test::NanochatFolder folder_{{5, 2}};
  TokenizerSpec spec_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::map<std::string, int> ids_;
};

TEST_F(ToolUseTest, ACallIsAnsweredWithItsResultThenTheModelSamplesAgain) {
  auto tools = ToolUse::of(spec_);
  ASSERT_TRUE(tools.has_value());
  EXPECT_FALSE(tools->take_forced().has_value()) << "nothing to force before a call";
  EXPECT_EQ(call(*tools, "12*3"), answer("36"));
  EXPECT_FALSE(tools->take_forced().has_value());
  EXPECT_EQ(call(*tools, "1,000/8"), answer("125.0"));
  EXPECT_EQ(call(*tools, "'strawberry'.count('r')"), answer("3"));
  // Text outside a call is just text, an expression included.
  for (int t : encode("2+2")) tools->observe(t, *tokenizer_);
  EXPECT_TRUE(drain(*tools).empty());
}

TEST_F(ToolUseTest, WhatTheCalculatorRefusesOrNoCallOpenedForcesNothing) {
  auto tools = ToolUse::of(spec_);
  ASSERT_TRUE(tools.has_value());
  for (const char* refused : {"2**10", "1/0", "open('x')", "", "(((", "'abc'.upper()"})
    EXPECT_TRUE(call(*tools, refused).empty()) << refused;
  tools->observe(ids_["<|python_end|>"], *tokenizer_);
  EXPECT_TRUE(drain(*tools).empty()) << "an end without a start";
  // A start inside a call drops what came before it, as nanochat's engine.
  tools->observe(ids_["<|python_start|>"], *tokenizer_);
  for (int t : encode("1+")) tools->observe(t, *tokenizer_);
  EXPECT_EQ(call(*tools, "2+2"), answer("4"));
}

TEST_F(ToolUseTest, AFreshStateForgetsAHalfWrittenCall) {
  auto tools = ToolUse::of(spec_);
  ASSERT_TRUE(tools.has_value());
  tools->observe(ids_["<|python_start|>"], *tokenizer_);
  for (int t : encode("7*6")) tools->observe(t, *tokenizer_);
  ToolUse fresh = tools->fresh();
  fresh.observe(ids_["<|python_end|>"], *tokenizer_);
  EXPECT_TRUE(drain(fresh).empty());
  tools->observe(ids_["<|python_end|>"], *tokenizer_);
  EXPECT_EQ(drain(*tools), answer("42"));
}

TEST_F(ToolUseTest, AVocabularyWithoutTheMarkersHasNoTool) {
  EXPECT_FALSE(ToolUse::of(test_util::bundled_model().model.config().tokenizer).has_value());
  TokenizerSpec some = spec_;
  std::erase_if(some.special_tokens,
                [](const SpecialToken& s) { return s.text == "<|output_end|>"; });
  EXPECT_FALSE(ToolUse::of(some).has_value()) << "three markers of four are not the protocol";
}

}  // namespace
}  // namespace kvtier

// The single-request generation loop on the bundled model: determinism
// across prefill chunking, seeds, stop strings, streaming, finish reasons and
// refused options.
#include "engine/model/generator.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace kvtier {
namespace {

class GeneratorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = &test_util::bundled_model().model;
    tokenizer_ = test_util::bundled_model().tokenizer.get();
    pool_ = new tiers::BlockPool(model_->kv_layout(16).block_bytes(), 32);
  }
  static void TearDownTestSuite() { delete pool_; }
  void TearDown() override { EXPECT_EQ(pool_->num_free(), pool_->num_blocks()) << "leaked KV"; }

  std::vector<int> encode(std::string_view text) {
    auto ids = tokenizer_->encode(text);
    EXPECT_TRUE(ids.has_value());
    return *ids;
  }
  std::expected<Generation, std::string> run(
      std::string_view prompt, const GenerateOptions& options,
      const std::function<void(std::string_view)>& on_text = {}) {
    return generate(*model_, *pool_, tokenizer_, encode(prompt), options, on_text);
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static tiers::BlockPool* pool_;
};

Model* GeneratorTest::model_ = nullptr;
Tokenizer* GeneratorTest::tokenizer_ = nullptr;
tiers::BlockPool* GeneratorTest::pool_ = nullptr;

GenerateOptions sampled(std::uint64_t seed, int max_tokens = 60) {
  GenerateOptions o;
  o.sampling = {0.9f, 40, 0.95f, seed};
  o.max_tokens = max_tokens;
  return o;
}

TEST_F(GeneratorTest, SameSeedSameTokensWhateverThePrefillChunk) {
  const auto base = run("Q: What is the difference between", sampled(7));
  ASSERT_TRUE(base.has_value()) << base.error();
  EXPECT_EQ(base->tokens.size(), 60u);
  EXPECT_EQ(base->finish, FinishReason::kLength);
  EXPECT_EQ(base->text, tokenizer_->decode(base->tokens));
  for (int chunk : {1, 3, 16, 17}) {
    auto o = sampled(7);
    o.prefill_chunk = chunk;
    const auto again = run("Q: What is the difference between", o);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->tokens, base->tokens) << "prefill chunk " << chunk;
  }
  for (int page : {1, 5}) {
    auto o = sampled(7);
    o.page_size = page;
    tiers::BlockPool pool(model_->kv_layout(page).block_bytes(), 300);
    const auto again =
        generate(*model_, pool, tokenizer_, encode("Q: What is the difference between"), o);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->tokens, base->tokens) << "page size " << page;
  }
  const auto other = run("Q: What is the difference between", sampled(8));
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(other->tokens, base->tokens) << "a different seed should draw differently";
}

TEST_F(GeneratorTest, StopsBeforeTheStopStringAndStreamsTheSameText) {
  const auto free_run = run("The ", sampled(3, 80));
  ASSERT_TRUE(free_run.has_value());
  ASSERT_GE(free_run->text.size(), 30u);
  // A stop string that first appears in the middle of the free run.
  const std::string stop = free_run->text.substr(20, 3);
  const std::size_t at = free_run->text.find(stop);

  auto o = sampled(3, 80);
  o.stop = {"\x01never", stop};
  std::string streamed;
  const auto stopped = run("The ", o, [&](std::string_view piece) { streamed += piece; });
  ASSERT_TRUE(stopped.has_value()) << stopped.error();
  EXPECT_EQ(stopped->finish, FinishReason::kStop);
  EXPECT_EQ(stopped->text, free_run->text.substr(0, at));
  EXPECT_EQ(streamed, stopped->text) << "the stream never shows part of a stop string";
  EXPECT_LT(stopped->tokens.size(), free_run->tokens.size());
}

TEST_F(GeneratorTest, StopsAtTheEndOfTextTokenUnlessToldToIgnoreIt) {
  const auto free_run = run("Q: Why? A:", sampled(5, 40));
  ASSERT_TRUE(free_run.has_value());
  const int eot = free_run->tokens[10];  // the end of the text, to this tokenizer
  const std::size_t first = static_cast<std::size_t>(
      std::find(free_run->tokens.begin(), free_run->tokens.end(), eot) - free_run->tokens.begin());
  const test_util::WithEndOfText tokenizer(*tokenizer_, eot);
  const auto stopped = generate(*model_, *pool_, &tokenizer, encode("Q: Why? A:"), sampled(5, 40));
  ASSERT_TRUE(stopped.has_value()) << stopped.error();
  EXPECT_EQ(stopped->finish, FinishReason::kStop);
  ASSERT_EQ(stopped->tokens.size(), first + 1) << "it ends with the end-of-text token";
  EXPECT_EQ(stopped->tokens.back(), eot);
  EXPECT_EQ(stopped->text, free_run->text.substr(0, first)) << "which writes no text";
  auto o = sampled(5, 40);
  o.ignore_eos = true;
  const auto ignored = generate(*model_, *pool_, &tokenizer, encode("Q: Why? A:"), o);
  ASSERT_TRUE(ignored.has_value());
  EXPECT_EQ(ignored->tokens, free_run->tokens);

  // A stop token (a chat format's end of turn) stops as the end of the text
  // does, with the tokenizer's own, and ignore_eos does not ignore it.
  o.stop_token_ids = {eot};
  const auto by_id = generate(*model_, *pool_, tokenizer_, encode("Q: Why? A:"), o);
  ASSERT_TRUE(by_id.has_value()) << by_id.error();
  EXPECT_EQ(by_id->finish, FinishReason::kStop);
  EXPECT_EQ(by_id->tokens, stopped->tokens);
  EXPECT_EQ(by_id->text, stopped->text);
  o.stop_token_ids = {model_->config().vocab_size};
  const auto outside = generate(*model_, *pool_, tokenizer_, encode("Q: Why? A:"), o);
  ASSERT_FALSE(outside.has_value());
  EXPECT_NE(outside.error().find("stop token"), std::string::npos) << outside.error();
}

TEST_F(GeneratorTest, EndsAtTheContextWithItsOwnReason) {
  const int context = model_->config().block_size;
  std::string prompt(static_cast<std::size_t>(context) - 5, 'a');
  GenerateOptions o = sampled(1, 100);
  const auto out = run(prompt, o);
  ASSERT_TRUE(out.has_value()) << out.error();
  EXPECT_EQ(out->finish, FinishReason::kContext);
  EXPECT_EQ(out->tokens.size(), 6u) << "positions 251..255 plus the token from the last one";
}

TEST_F(GeneratorTest, RefusesBadOptionsWithClearMessages) {
  auto expect_error = [&](std::vector<int> prompt, GenerateOptions o, const Tokenizer* tok,
                          std::string_view needle) {
    const auto r = generate(*model_, *pool_, tok, prompt, o);
    ASSERT_FALSE(r.has_value()) << "expected: " << needle;
    EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
  };
  const auto ok_prompt = encode("Hello");
  expect_error({}, sampled(1), tokenizer_, "prompt is empty");
  expect_error(std::vector<int>(model_->config().block_size + 1, 1), sampled(1), tokenizer_,
               "context is 256");
  auto o = sampled(1);
  o.max_tokens = 0;
  expect_error(ok_prompt, o, tokenizer_, "max_tokens");
  o = sampled(1);
  o.sampling.temperature = -1.0f;
  expect_error(ok_prompt, o, tokenizer_, "temperature");
  o = sampled(1);
  o.stop = {"x"};
  expect_error(ok_prompt, o, nullptr, "need a tokenizer");
  o.stop = {""};
  expect_error(ok_prompt, o, tokenizer_, "empty");
  expect_error({1, 2, model_->config().vocab_size}, sampled(1), tokenizer_, "vocabulary");
}

TEST_F(GeneratorTest, ReportsAFullPoolInsteadOfFailingSilently) {
  tiers::BlockPool tiny(model_->kv_layout(16).block_bytes(), 1);
  const auto r = generate(*model_, tiny, tokenizer_, encode(std::string(40, 'x')), sampled(1));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("no free block"), std::string::npos) << r.error();
  EXPECT_EQ(tiny.num_free(), 1);
}

}  // namespace
}  // namespace kvtier

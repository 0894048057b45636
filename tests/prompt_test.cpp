// The one way a front door's prompt and options become what the scheduler
// takes: text encoded, ids passed through, the options kept whole.
#include "wire/prompt.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::wire {
namespace {

// One token per byte, refusing '~' as a character the vocabulary lacks.
class ByteTokenizer final : public Tokenizer {
 public:
  std::expected<std::vector<int>, std::string> encode(std::string_view text) const override {
    std::vector<int> ids;
    for (unsigned char c : text) {
      if (c == '~') return std::unexpected(std::string("no token for '~'"));
      ids.push_back(c);
    }
    return ids;
  }
  std::string decode(std::span<const int> tokens) const override {
    std::string text;
    for (int t : tokens) text += static_cast<char>(t);
    return text;
  }
  int vocab_size() const override { return 256; }
};

TEST(PromptTest, TextIsEncodedAndIdsPassThrough) {
  const ByteTokenizer tokenizer;
  EXPECT_EQ(prompt_tokens(tokenizer, std::string("ab")), (std::vector<int>{'a', 'b'}));
  // The ids are the caller's to check against the model.
  EXPECT_EQ(prompt_tokens(tokenizer, std::vector<int>{-1, 999}), (std::vector<int>{-1, 999}));
  const auto refused = prompt_tokens(tokenizer, std::string("a~"));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), "cannot encode the prompt: no token for '~'");
}

TEST(PromptTest, RequestParamsKeepEveryOption) {
  const ByteTokenizer tokenizer;
  RequestOptions options;
  options.sampling = {0.5f, 7, 0.9f, 42};
  options.max_tokens = 3;
  options.stop = {"\n"};
  options.priority = 2;
  options.n = 4;
  options.cache_salt = "tenant";
  options.eviction = EvictionPolicy::none();
  options.logprobs = 1;
  options.ignore_eos = true;
  const auto p = request_params(tokenizer, std::string("hi"), options);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->prompt, (std::vector<int>{'h', 'i'}));
  EXPECT_EQ(p->sampling.temperature, 0.5f);
  EXPECT_EQ(p->sampling.top_k, 7);
  EXPECT_EQ(p->sampling.top_p, 0.9f);
  EXPECT_EQ(p->sampling.seed, 42u);
  EXPECT_EQ(p->max_tokens, 3);
  EXPECT_EQ(p->stop, options.stop);
  EXPECT_EQ(p->priority, 2);
  EXPECT_EQ(p->n, 4);
  EXPECT_EQ(p->cache_salt, "tenant");
  EXPECT_EQ(p->eviction, options.eviction);
  EXPECT_EQ(p->logprobs, 1);
  EXPECT_TRUE(p->ignore_eos);
  EXPECT_FALSE(request_params(tokenizer, std::string("~"), options).has_value());
}

}  // namespace
}  // namespace kvtier::wire

// The forward pass: the three attention cases, batch invariance and bad
// batches, on small random models (golden comparisons live in golden_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "engine/model/gpt2/gpt2_model.h"
#include "tests/forward_test_util.h"

namespace kvtier {
namespace {

using forward_test_util::argmax;
using forward_test_util::random_tokens;
using forward_test_util::same_bits;
using forward_test_util::tiny_config;
using forward_test_util::tiny_variants;
using forward_test_util::variant_name;

struct Fixture {
  explicit Fixture(ModelConfig config, int page_size = 16, int blocks = 256)
      : model(config, ModelWeights::random(config, 1234)),
        pool(model.kv_layout(page_size).block_bytes(), blocks),
        page_size(page_size) {}
  Gpt2Model model;
  tiers::BlockPool pool;
  int page_size;

  // Runs one chunk alone and returns its logits rows.
  std::vector<float> run(SequenceKv& kv, std::span<const int> tokens, bool all_logits) {
    EXPECT_TRUE(kv.reserve(pool, kv.length() + static_cast<int>(tokens.size())));
    const Model::Chunk chunk{&kv, tokens, all_logits};
    auto logits = model.forward(std::span(&chunk, 1), pool);
    EXPECT_TRUE(logits.has_value()) << logits.error();
    return std::vector<float>(logits->begin(), logits->end());
  }
};

class ModelVariants : public ::testing::TestWithParam<ModelConfig> {};

// Full prefill, chunked prefill in chunks of any size, and one token at a
// time give the same logits at every position, bit for bit.
TEST_P(ModelVariants, PrefillChunkedAndDecodeAgreeBitForBit) {
  Fixture f(GetParam());
  const int V = GetParam().vocab_size;
  std::mt19937 rng(42);
  const auto prompt = random_tokens(rng, 77, V);

  SequenceKv whole(f.page_size);
  const auto expected = f.run(whole, prompt, true);
  ASSERT_EQ(expected.size(), prompt.size() * V);

  for (int trial = 0; trial < 4; ++trial) {
    SequenceKv kv(f.page_size);
    std::vector<float> got;
    std::uniform_int_distribution<int> size(1, trial == 0 ? 1 : 19);
    for (std::size_t begin = 0; begin < prompt.size();) {
      const std::size_t n = std::min<std::size_t>(size(rng), prompt.size() - begin);
      const auto rows = f.run(kv, std::span(prompt).subspan(begin, n), true);
      got.insert(got.end(), rows.begin(), rows.end());
      begin += n;
    }
    EXPECT_TRUE(same_bits(expected, got)) << "trial " << trial;
    EXPECT_EQ(kv.length(), static_cast<int>(prompt.size()));
    kv.release(f.pool);
  }
  whole.release(f.pool);
  EXPECT_EQ(f.pool.num_free(), f.pool.num_blocks());
}

// Sequences run alone, then the same sequences run in random mixes of
// prefill chunks and decode steps: every logit row matches bit for bit.
TEST_P(ModelVariants, BatchCompositionDoesNotChangeLogits) {
  Fixture f(GetParam());
  auto forward = [&f](std::span<const Model::Chunk> batch) {
    return f.model.forward(batch, f.pool);
  };
  for (unsigned seed : {1u, 2u, 3u})
    EXPECT_TRUE(forward_test_util::batch_mixes_match_alone(forward, f.pool, f.page_size,
                                                           GetParam().vocab_size, seed))
        << "seed " << seed;
  EXPECT_EQ(f.pool.num_free(), f.pool.num_blocks());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelVariants, ::testing::ValuesIn(tiny_variants()),
                         [](const ::testing::TestParamInfo<ModelConfig>& info) {
                           return variant_name(info.param);
                         });

TEST(Model, PageSizeDoesNotChangeLogits) {
  const auto config = tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4);
  std::mt19937 rng(9);
  const auto prompt = random_tokens(rng, 50, config.vocab_size);
  std::vector<float> first;
  for (int page : {16, 7, 1}) {
    Fixture f(config, page, 128);
    SequenceKv kv(page);
    const auto logits = f.run(kv, prompt, true);
    if (first.empty())
      first = logits;
    else
      EXPECT_TRUE(same_bits(first, logits)) << "page size " << page;
    kv.release(f.pool);
  }
}

TEST(Model, RefusesBadBatchesAndChangesNothing) {
  Fixture f(tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4));
  SequenceKv kv(f.page_size);
  const std::vector<int> ok{1, 2, 3};
  ASSERT_TRUE(kv.reserve(f.pool, 3));
  auto expect_error = [&](std::vector<Model::Chunk> batch, const std::string& needle) {
    auto r = f.model.forward(batch, f.pool);
    ASSERT_FALSE(r.has_value()) << "expected an error mentioning '" << needle << "'";
    EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
    EXPECT_EQ(kv.length(), 0);
  };
  expect_error({}, "empty batch");
  expect_error({{&kv, {}, false}}, "no tokens");
  const std::vector<int> bad{1, 61};
  expect_error({{&kv, bad, false}}, "outside the vocabulary");
  const std::vector<int> negative{-1};
  expect_error({{&kv, negative, false}}, "outside the vocabulary");
  expect_error({{&kv, ok, false}, {&kv, ok, false}}, "repeats a sequence");
  const std::vector<int> long_chunk(20, 1);
  expect_error({{&kv, long_chunk, false}}, "pages for 16 positions");
  SequenceKv full(f.page_size);
  ASSERT_TRUE(full.reserve(f.pool, 112));
  const std::vector<int> too_long(97, 1);
  expect_error({{&full, too_long, false}}, "context is 96 tokens");
  full.release(f.pool);
  kv.release(f.pool);
}

TEST(Model, FillsTheContextExactlyAndNoFurther) {
  Fixture f(tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4));
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 96, 61);
  SequenceKv kv(f.page_size);
  f.run(kv, std::span(prompt).first(95), false);
  f.run(kv, std::span(prompt).subspan(95), false);
  EXPECT_EQ(kv.length(), 96);
  ASSERT_TRUE(kv.reserve(f.pool, 97));
  const int one = 0;
  const Model::Chunk chunk{&kv, std::span(&one, 1), false};
  EXPECT_FALSE(f.model.forward(std::span(&chunk, 1), f.pool).has_value());
  EXPECT_EQ(kv.length(), 96);
  kv.release(f.pool);
}

// H2O's attention scores: asking for them changes no logit bit; they are
// integers, so whole and chunked prefill give the same sums; and each row
// adds one unit per layer and head (its softmax sums to 1), give or take the
// fixed-point rounding.
TEST(Model, AttentionScoresChangeNoLogitAndIgnoreChunking) {
  const auto config = tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4);
  Fixture f(config);
  std::mt19937 rng(13);
  const auto prompt = random_tokens(rng, 60, config.vocab_size);

  SequenceKv plain(f.page_size);
  const auto expected = f.run(plain, prompt, true);
  plain.release(f.pool);

  std::vector<kernels::AttentionScore> whole_scores(config.block_size, 0);
  SequenceKv whole(f.page_size);
  ASSERT_TRUE(whole.reserve(f.pool, 60));
  const Model::Chunk chunk{&whole, prompt, true, whole_scores.data()};
  auto logits = f.model.forward(std::span(&chunk, 1), f.pool);
  ASSERT_TRUE(logits.has_value()) << logits.error();
  EXPECT_TRUE(same_bits(expected, *logits));
  whole.release(f.pool);

  std::vector<kernels::AttentionScore> chunked_scores(config.block_size, 0);
  SequenceKv kv(f.page_size);
  for (int begin = 0; begin < 60; begin += 7) {
    const auto piece = std::span(prompt).subspan(begin, std::min(7, 60 - begin));
    ASSERT_TRUE(kv.reserve(f.pool, kv.length() + static_cast<int>(piece.size())));
    const Model::Chunk c{&kv, piece, false, chunked_scores.data()};
    ASSERT_TRUE(f.model.forward(std::span(&c, 1), f.pool).has_value());
  }
  kv.release(f.pool);
  EXPECT_EQ(whole_scores, chunked_scores);

  long double total = 0;
  for (auto s : whole_scores) total += static_cast<long double>(s) / kernels::kScoreOne;
  const double units = 60.0 * config.n_layer * config.n_head;
  EXPECT_NEAR(static_cast<double>(total), units, units * 1e-5);
}

// A sequence with an evicted page: its logits change (the page is skipped),
// stay batch-invariant, and its evicted positions gather no scores.
TEST(Model, EvictedPagesAreSkippedAndBatchInvariant) {
  const auto config = tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4);
  Fixture f(config);
  std::mt19937 rng(21);
  const auto prompt = random_tokens(rng, 40, config.vocab_size);
  const auto other = random_tokens(rng, 23, config.vocab_size);

  // Full cache, then the same with page 1 (positions 16..31) evicted; both
  // decode three steps with the same tokens.
  auto decode = [&](SequenceKv& kv, std::vector<kernels::AttentionScore>* scores) {
    std::vector<std::vector<float>> rows;
    for (int token : {3, 1, 4}) {
      EXPECT_TRUE(kv.reserve(f.pool, kv.length() + 1));
      const Model::Chunk c{&kv, std::span(&token, 1), false,
                           scores != nullptr ? scores->data() : nullptr};
      auto logits = f.model.forward(std::span(&c, 1), f.pool);
      EXPECT_TRUE(logits.has_value());
      rows.emplace_back(logits->begin(), logits->end());
    }
    return rows;
  };
  SequenceKv full(f.page_size);
  f.run(full, prompt, false);
  const auto full_rows = decode(full, nullptr);
  full.release(f.pool);

  SequenceKv alone(f.page_size);
  f.run(alone, prompt, false);
  alone.evict_block(f.pool, 1);
  std::vector<kernels::AttentionScore> scores(config.block_size, 0);
  const auto alone_rows = decode(alone, &scores);
  for (int t = 16; t < 32; ++t) EXPECT_EQ(scores[t], 0) << "evicted position " << t;
  EXPECT_GT(scores[0], 0);
  EXPECT_GT(scores[32], 0);
  for (std::size_t i = 0; i < full_rows.size(); ++i)
    EXPECT_FALSE(same_bits(full_rows[i], alone_rows[i])) << "step " << i;
  alone.release(f.pool);

  // The same steps batched beside another sequence's prefill chunks.
  SequenceKv kv(f.page_size), neighbour(f.page_size);
  f.run(kv, prompt, false);
  kv.evict_block(f.pool, 1);
  int fed = 0;
  std::vector<kernels::AttentionScore> batched_scores(config.block_size, 0);
  std::vector<std::vector<float>> batched_rows;
  for (int token : {3, 1, 4}) {
    const auto piece = std::span(other).subspan(fed, 7);
    fed += 7;
    ASSERT_TRUE(kv.reserve(f.pool, kv.length() + 1));
    ASSERT_TRUE(neighbour.reserve(f.pool, neighbour.length() + 7));
    const std::vector<Model::Chunk> batch{
        {&neighbour, piece, false}, {&kv, std::span(&token, 1), false, batched_scores.data()}};
    auto logits = f.model.forward(batch, f.pool);
    ASSERT_TRUE(logits.has_value()) << logits.error();
    const auto row = logits->subspan(config.vocab_size, config.vocab_size);
    batched_rows.emplace_back(row.begin(), row.end());
  }
  for (std::size_t i = 0; i < alone_rows.size(); ++i)
    EXPECT_TRUE(same_bits(alone_rows[i], batched_rows[i])) << "step " << i;
  EXPECT_EQ(scores, batched_scores);
  kv.release(f.pool);
  neighbour.release(f.pool);
  EXPECT_EQ(f.pool.num_free(), f.pool.num_blocks());
}

// Decode rows of sequences that share a prompt's pages (forks, as the
// prefix cache shares pages) read those pages together: each row still gets
// the logits it gets alone, beside a fork that dropped a shared page, an
// unrelated sequence and another sequence's prefill chunk. Heads of 64 take
// the register-blocked attention paths, heads of 8 the generic ones.
TEST(Model, DecodeRowsSharingAPromptGetTheLogitsTheyGetAlone) {
  auto wide = tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 2);
  wide.n_embd = 128;
  wide.n_head = 2;
  for (const ModelConfig& config :
       {wide, tiny_config(kernels::WeightLayout::kInOut, Gelu::kTanh, true, 2)}) {
    Fixture f(config);
    std::mt19937 rng(5);
    const auto prompt = random_tokens(rng, 40, config.vocab_size);
    const auto stranger = random_tokens(rng, 21, config.vocab_size);
    const auto chunk = random_tokens(rng, 9, config.vocab_size);
    constexpr int kForks = 7, kSteps = 3;

    // Two identical families: the root's prompt, its forks, one of which
    // dropped shared page 0, and an unrelated sequence.
    auto family = [&] {
      std::vector<SequenceKv> seqs;
      seqs.emplace_back(f.page_size);
      f.run(seqs[0], prompt, false);
      for (int i = 0; i < kForks; ++i) seqs.push_back(seqs[0].fork(f.pool));
      seqs[2].evict_block(f.pool, 0);
      seqs.emplace_back(f.page_size);
      f.run(seqs.back(), stranger, false);
      return seqs;
    };
    auto token = [&](std::size_t seq, int step) {
      return static_cast<int>((seq * 7 + static_cast<std::size_t>(step) * 3) % config.vocab_size);
    };
    std::vector<SequenceKv> alone = family(), together = family();
    SequenceKv neighbour(f.page_size);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<int> tokens(together.size());
      std::vector<Model::Chunk> batch;
      for (std::size_t i = 0; i < together.size(); ++i) {
        tokens[i] = token(i, step);
        ASSERT_TRUE(together[i].reserve(f.pool, together[i].length() + 1));
        batch.push_back({&together[i], std::span(&tokens[i], 1), false});
      }
      ASSERT_TRUE(neighbour.reserve(f.pool, neighbour.length() + 3));
      batch.push_back({&neighbour, std::span(chunk).subspan(3 * step, 3), false});
      auto logits = f.model.forward(batch, f.pool);
      ASSERT_TRUE(logits.has_value()) << logits.error();
      const std::vector<float> rows(logits->begin(), logits->end());
      for (std::size_t i = 0; i < alone.size(); ++i) {
        const auto one = f.run(alone[i], std::span(&tokens[i], 1), false);
        EXPECT_TRUE(
            same_bits(one, std::span(rows).subspan(i * config.vocab_size, config.vocab_size)))
            << variant_name(config) << " sequence " << i << " step " << step;
      }
    }
    for (auto& s : alone) s.release(f.pool);
    for (auto& s : together) s.release(f.pool);
    neighbour.release(f.pool);
    EXPECT_EQ(f.pool.num_free(), f.pool.num_blocks());
  }
}

TEST(Model, RefusesToWriteIntoAnEvictedPage) {
  Fixture f(tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4));
  SequenceKv kv = SequenceKv::adopt(f.page_size, {SequenceKv::kEvictedBlock}, 0);
  const int token = 1;
  const Model::Chunk chunk{&kv, std::span(&token, 1), false};
  auto r = f.model.forward(std::span(&chunk, 1), f.pool);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("evicted page"), std::string::npos) << r.error();
  EXPECT_EQ(kv.length(), 0);
}

}  // namespace

// Readable parameters in test listings and failure messages.
void PrintTo(const ModelConfig& c, std::ostream* os) { *os << variant_name(c); }

}  // namespace kvtier

// NanochatModel, every generation, against tests/nanochat_reference.py: a
// numpy forward written from the notes, on random weights in a model folder
// as the converter writes one. Logits within 1e-4 at every position, the
// same greedy tokens, at n_kv_head < n_head and =, with windows and a
// context past sequence_len; and the engine's own invariances bit for bit:
// any chunking, any batch, with or without H2O's attention scores. The
// reference needs Debian's python3-numpy (scripts/install-deps.sh); without
// it those tests skip and say so.
#include "engine/model/nanochat/nanochat_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "nanochat_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using nanochat_test::kShapes;
using nanochat_test::NanochatFolder;
using nanochat_test::random_tokens;
using nanochat_test::Shape;
using nanochat_test::shape_name;
using nlohmann::json;

constexpr int kPage = 16;

// Every position's logits, the sequence run in chunks of the given sizes
// (cycled), in a pool of its own.
std::vector<float> run_chunked(NanochatModel& model, const std::vector<int>& tokens,
                               const std::vector<int>& sizes) {
  tiers::BlockPool pool(model.kv_layout(kPage).block_bytes(), 32);
  return nanochat_test::run_chunked(
      [&model](std::span<const Model::Chunk> chunks, tiers::BlockPool& p) {
        return model.forward(chunks, p);
      },
      pool, kPage, tokens, sizes);
}

TEST(NanochatModelTest, FollowsTheNumpyReferenceForEveryGeneration) {
  if (!fs::exists("/usr/bin/python3") ||
      test_util::run_command("/usr/bin/python3 -c 'import numpy' 2>&1").status != 0)
    GTEST_SKIP() << "the reference needs Debian's python3-numpy for /usr/bin/python3 "
                    "(scripts/install-deps.sh installs it)";
  const std::vector<int> tokens = random_tokens(300, 5);
  for (const Shape shape : kShapes) {
    NanochatFolder folder(shape);
    auto model = NanochatModel::load(folder.path());
    ASSERT_TRUE(model.has_value()) << model.error();
    const std::vector<float> ours = run_chunked(*model, tokens, {300});
    test_util::TempDir work;
    const fs::path tokens_json = work.write("tokens.json", json(tokens).dump());
    const fs::path out = work.path() / "logits.f32";
    const auto run = test_util::run_command(
        "/usr/bin/python3 '" KVTIER_SOURCE_DIR "/tests/nanochat_reference.py' '" +
        folder.path().string() + "' '" + tokens_json.string() + "' '" + out.string() + "' 8 2>&1");
    ASSERT_EQ(run.status, 0) << run.output;
    const std::string bytes = test_util::read_file(out);
    ASSERT_EQ(bytes.size(), ours.size() * sizeof(float)) << shape_name(shape);
    std::vector<float> want(ours.size());
    std::memcpy(want.data(), bytes.data(), bytes.size());
    float worst = 0;
    for (std::size_t i = 0; i < ours.size(); ++i)
      worst = std::max(worst, std::abs(ours[i] - want[i]));
    EXPECT_LT(worst, 1e-4f) << shape_name(shape);
    std::printf("%s: largest logit difference from numpy %.3g\n", shape_name(shape).c_str(), worst);

    // Greedy: eight tokens, each from the engine's cache, against the
    // reference's fresh full forwards.
    const KvLayout layout = model->kv_layout(kPage);
    tiers::BlockPool pool(layout.block_bytes(), 32);
    SequenceKv kv(kPage);
    ASSERT_TRUE(kv.reserve(pool, 308));
    std::vector<int> seq = tokens, greedy;
    Model::Chunk chunk{&kv, std::span(seq), false};
    for (int step = 0; step < 8; ++step) {
      auto logits = model->forward(std::span(&chunk, 1), pool);
      ASSERT_TRUE(logits.has_value()) << logits.error();
      greedy.push_back(static_cast<int>(std::ranges::max_element(*logits) - logits->begin()));
      seq.push_back(greedy.back());
      chunk.previous_token = seq[seq.size() - 2];
      chunk.tokens = std::span(seq).last(1);
    }
    kv.release(pool);
    EXPECT_EQ(json(greedy), json::parse(run.output)) << shape_name(shape);
  }
}

TEST(NanochatModelTest, ChunkingAndBatchingDoNotChangeTheBits) {
  const std::vector<int> tokens = random_tokens(290, 9);
  for (const Shape shape : {Shape{5, 2}, Shape{3, 4}}) {
    NanochatFolder folder(shape);
    auto model = NanochatModel::load(folder.path());
    ASSERT_TRUE(model.has_value()) << model.error();
    const std::vector<float> whole = run_chunked(*model, tokens, {290});
    for (const std::vector<int>& sizes : {std::vector<int>{1}, {7, 1, 33}, {128, 16}}) {
      const std::vector<float> chunked = run_chunked(*model, tokens, sizes);
      ASSERT_EQ(chunked.size(), whole.size());
      EXPECT_EQ(0, std::memcmp(chunked.data(), whole.data(), whole.size() * sizeof(float)))
          << shape_name(shape) << " chunks of " << json(sizes).dump();
    }
    // Two sequences in one batch: each row's logits are its own alone.
    const std::vector<int> other = random_tokens(100, 11);
    const KvLayout layout = model->kv_layout(kPage);
    tiers::BlockPool pool(layout.block_bytes(), 64);
    SequenceKv a(kPage), b(kPage);
    ASSERT_TRUE(a.reserve(pool, 290));
    ASSERT_TRUE(b.reserve(pool, 100));
    Model::Chunk chunks[] = {{&a, std::span(tokens).first(150), true},
                             {&b, std::span(other), true}};
    ASSERT_TRUE(model->forward(chunks, pool).has_value());
    chunks[0] = {&a, std::span(tokens).subspan(150), true};
    chunks[0].previous_token = tokens[149];
    auto rest = model->forward(std::span(chunks, 1), pool);
    ASSERT_TRUE(rest.has_value()) << rest.error();
    EXPECT_EQ(0, std::memcmp(rest->data(), whole.data() + 150 * 300, 140 * 300 * sizeof(float)))
        << shape_name(shape);
    a.release(pool);
    b.release(pool);
  }
}

// H2O's attention scores on a nanochat model (GQA, short windows):
// asking for them changes no logit bit; the integer sums are the same for a
// whole prefill, a chunked one and a batch beside another sequence; and
// every row adds one unit per layer and head, window or not (from
// Chunk::scores_from on, when set).
TEST(NanochatModelTest, AttentionScoresChangeNoLogitAndIgnoreChunkingAndBatch) {
  const std::vector<int> tokens = random_tokens(290, 17);
  NanochatFolder folder({5, 2});
  auto model = NanochatModel::load(folder.path());
  ASSERT_TRUE(model.has_value()) << model.error();
  const std::vector<float> plain = run_chunked(*model, tokens, {290});
  const KvLayout layout = model->kv_layout(kPage);
  tiers::BlockPool pool(layout.block_bytes(), 64);
  auto scored = [&](const std::vector<int>& sizes, bool beside_another, int from = 0) {
    std::vector<kernels::AttentionScore> scores(tokens.size(), 0);
    SequenceKv kv(kPage), other(kPage);
    EXPECT_TRUE(kv.reserve(pool, 290));
    EXPECT_TRUE(other.reserve(pool, 40));
    const std::vector<int> other_tokens = random_tokens(40, 3);
    std::vector<float> logits;
    for (std::size_t at = 0, i = 0; at < tokens.size(); ++i) {
      const std::size_t n = std::min<std::size_t>(sizes[i % sizes.size()], tokens.size() - at);
      std::vector<Model::Chunk> chunks = {
          {&kv, std::span(tokens).subspan(at, n), true, scores.data()}};
      chunks[0].previous_token = at == 0 ? -1 : tokens[at - 1];
      chunks[0].scores_from = from;
      if (beside_another && i == 0) chunks.push_back({&other, std::span(other_tokens), true});
      auto out = model->forward(chunks, pool);
      EXPECT_TRUE(out.has_value()) << out.error();
      if (!out) break;
      logits.insert(logits.end(), out->begin(), out->begin() + static_cast<long>(n) * 300);
      at += n;
    }
    EXPECT_EQ(logits.size(), plain.size());
    EXPECT_EQ(0, std::memcmp(logits.data(), plain.data(), plain.size() * sizeof(float)))
        << "scores changed a logit, chunks of " << json(sizes).dump();
    kv.release(pool);
    other.release(pool);
    return scores;
  };
  const auto whole = scored({290}, false);
  EXPECT_EQ(scored({7, 1, 33}, false), whole);
  EXPECT_EQ(scored({128, 16}, true), whole);
  long double total = 0;
  for (auto s : whole) total += static_cast<long double>(s) / kernels::kScoreOne;
  const double units = 290.0 * 4 * 4;  // rows x layers x heads
  EXPECT_NEAR(static_cast<double>(total), units, units * 1e-5);

  // SnapKV's: only the rows from position 280 on add, chunked or not.
  const auto last_ten = scored({290}, false, 280);
  EXPECT_EQ(scored({7, 1, 33}, false, 280), last_ten);
  long double part = 0;
  for (auto s : last_ten) part += static_cast<long double>(s) / kernels::kScoreOne;
  EXPECT_NEAR(static_cast<double>(part), 10.0 * 4 * 4, 10.0 * 4 * 4 * 1e-5);
}

TEST(NanochatModelTest, BadFoldersAndBatchesAreRefusedWithTheReason) {
  NanochatFolder folder({5, 2});
  auto model = NanochatModel::load(folder.path());
  ASSERT_TRUE(model.has_value()) << model.error();
  const KvLayout layout = model->kv_layout(kPage);
  tiers::BlockPool pool(layout.block_bytes(), 8);
  SequenceKv kv(kPage);
  ASSERT_TRUE(kv.reserve(pool, 32));
  const std::vector<int> tokens = {1, 2, 3};
  Model::Chunk chunk{&kv, std::span(tokens), false};
  chunk.previous_token = 7;
  auto refused = model->forward(std::span(&chunk, 1), pool);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(test_util::contains(refused.error(), "none comes before position 0"));
  chunk.previous_token = -1;
  ASSERT_TRUE(model->forward(std::span(&chunk, 1), pool).has_value());
  refused = model->forward(std::span(&chunk, 1), pool);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(test_util::contains(refused.error(), "names the token before it"));
  const std::vector<int> padded = {310};
  chunk = {&kv, std::span(padded), false};
  chunk.previous_token = 3;
  refused = model->forward(std::span(&chunk, 1), pool);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(test_util::contains(refused.error(), "outside the vocabulary [0, 300)"))
      << "padding rows are never a token";
  kv.release(pool);

  // Configs: each key's mistake named.
  const json good = json::parse(test_util::read_file(folder.path() / "config.json"));
  const std::pair<json, std::string> bad[] = {
      {{{"generation", 6}}, "\"generation\" is 6, above the limit 5"},
      {{{"generation", 0}}, "\"generation\" must be positive"},
      {{{"n_kv_head", 3}}, "must be a multiple of n_kv_head 3"},
      {{{"n_embd", 68}}, "heads of an even size"},
      {{{"window_pattern", "SXL"}}, "only 'S' and 'L'"},
      {{{"window_pattern", nullptr}}, "\"window_pattern\" must be a string"},
      {{{"rope_table", "fp16"}}, "\"rope_table\" must be \"bf16\" or \"fp32\""},
      {{{"softcap", -1}}, "\"softcap\" must be a positive number"},
      {{{"context", 2561}}, "\"context\" is 2561, above the limit 2560"},
      {{{"format", "nanogpt"}}, "\"format\" must be \"nanochat\""},
  };
  for (const auto& [patch, error] : bad) {
    json config = good;
    config.merge_patch(patch);
    if (patch.contains("window_pattern") && patch["window_pattern"].is_null())
      config["window_pattern"] = nullptr;
    auto parsed = NanochatConfig::parse(config.dump(), folder.path());
    ASSERT_FALSE(parsed.has_value()) << error;
    EXPECT_TRUE(test_util::contains(parsed.error(), error));
  }
  json no_pattern = good;
  no_pattern.erase("window_pattern");
  EXPECT_TRUE(test_util::contains(NanochatConfig::parse(no_pattern.dump(), folder.path()).error(),
                                  "missing required key \"window_pattern\""));

  // Weights: a generation the tensors are not.
  json g3 = good;
  g3["generation"] = 3;
  test_util::write_file(folder.path() / "config.json", g3.dump());
  auto wrong = NanochatModel::load(folder.path());
  ASSERT_FALSE(wrong.has_value());
  EXPECT_TRUE(test_util::contains(wrong.error(), "unexpected tensors: 'backout_lambda'"));
  EXPECT_TRUE(test_util::contains(
      wrong.error(),
      "'transformer.h.1.attn.ve_gate.weight' is [2, 12], expected [2, 32] for generation 3"));
}

}  // namespace
}  // namespace kvtier

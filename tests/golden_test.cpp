// The C++ forward pass against an independent PyTorch implementation
// (scripts/make_golden.py): logits at chosen positions within 1e-4 and greedy
// continuations token for token, on the shipped model and two tiny random
// models that cover the other dialect, orientation, GELU and bias settings.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model/generator.h"
#include "engine/model/gpt2/gpt2_model.h"

namespace kvtier {
namespace {

constexpr float kLogitTolerance = 1e-4f;

class Golden : public ::testing::TestWithParam<const char*> {
 protected:
  std::filesystem::path dir() const {
    return std::filesystem::path(KVTIER_SOURCE_DIR) / GetParam();
  }
};

TEST_P(Golden, LogitsAndGreedyTokensMatchPyTorch) {
  std::ifstream in(dir() / "golden.json");
  ASSERT_TRUE(in) << "missing " << (dir() / "golden.json") << ": run scripts/make_golden.py";
  const auto golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden.at("version"), 1);

  auto model = Gpt2Model::load(dir());
  ASSERT_TRUE(model.has_value()) << model.error();
  const int V = model->config().vocab_size;
  const int context = model->config().block_size;
  tiers::BlockPool pool(model->kv_layout(16).block_bytes(), context / 16 + 2);

  ASSERT_FALSE(golden.at("cases").empty());
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto tokens = c.at("tokens").get<std::vector<int>>();
    SequenceKv kv(16);
    ASSERT_TRUE(kv.reserve(pool, static_cast<int>(tokens.size())));
    const Model::Chunk chunk{&kv, tokens, true};
    auto logits = model->forward(std::span(&chunk, 1), pool);
    ASSERT_TRUE(logits.has_value()) << logits.error();
    const auto positions = c.at("logit_positions").get<std::vector<int>>();
    const auto expected = c.at("logits").get<std::vector<std::vector<double>>>();
    ASSERT_EQ(positions.size(), expected.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < positions.size(); ++i) {
      ASSERT_EQ(expected[i].size(), static_cast<std::size_t>(V));
      const auto row = logits->subspan(static_cast<std::size_t>(positions[i]) * V, V);
      for (int v = 0; v < V; ++v) worst = std::max(worst, std::abs(row[v] - expected[i][v]));
    }
    EXPECT_LT(worst, kLogitTolerance) << "largest logit difference";
    kv.release(pool);

    const auto greedy = c.at("greedy_tokens").get<std::vector<int>>();
    GenerateOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = static_cast<int>(greedy.size());
    auto out = generate(*model, pool, nullptr, tokens, options);
    ASSERT_TRUE(out.has_value()) << out.error();
    EXPECT_EQ(out->tokens, greedy);

    // A continuation that fills the context ends there, with that reason.
    if (tokens.size() + greedy.size() >= static_cast<std::size_t>(context)) {
      options.max_tokens = context;
      auto full = generate(*model, pool, nullptr, tokens, options);
      ASSERT_TRUE(full.has_value()) << full.error();
      EXPECT_EQ(full->finish, FinishReason::kContext);
      EXPECT_EQ(tokens.size() + full->tokens.size(), static_cast<std::size_t>(context) + 1)
          << "the last token comes from the logits at the last position";
      EXPECT_TRUE(std::equal(greedy.begin(), greedy.end(), full->tokens.begin()));
    }
    EXPECT_EQ(pool.num_free(), pool.num_blocks());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Golden,
                         ::testing::Values("models/fortunes-char", "models/fortunes-char-5m",
                                           "tests/data/tiny-nanogpt", "tests/data/tiny-hf"),
                         [](const auto& info) {
                           std::string name = std::filesystem::path(info.param).filename();
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace kvtier

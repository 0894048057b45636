// The GPU forward (engine/cuda/cuda_model.h): against the CPU Model on
// random models of every variant and on the bundled models (logits within
// tolerance, greedy tokens equal), batch invariance on the GPU bit for bit
// (chunked prefill, random batch mixes), and the batches it refuses. Built
// only with the CUDA side; without a device the GPU tests are skipped with
// the reason, and CudaModelNoDevice checks that create() says why.
#include "engine/cuda/cuda_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "engine/device.h"
#include "kernels/cuda/cuda_device.h"
#include "tests/cuda_test_util.h"
#include "tests/forward_test_util.h"

namespace kvtier {
namespace {

using CudaModelTest = cuda_test_util::CudaDeviceTest;
using forward_test_util::argmax;
using forward_test_util::random_tokens;
using forward_test_util::same_bits;
using forward_test_util::tiny_variants;
using forward_test_util::variant_name;

// A model on both devices, each with its own KV pool of the same shape: the
// GPU's forward and L1 as open_device (engine/device.h) makes them.
struct Twin {
  static constexpr int kPage = 16;
  static constexpr int kBlocks = 256;
  explicit Twin(Gpt2Model m)
      : model(std::move(m)), cpu_pool(model.kv_layout(kPage).block_bytes(), kBlocks) {
    SchedulerConfig l1;
    l1.page_size = kPage;
    l1.max_kv_tokens = kBlocks * kPage;
    auto opened = open_device(model, l1, {.kind = "cuda"});
    EXPECT_TRUE(opened.has_value()) << opened.error();
    if (opened) gpu = std::move(*opened);
  }
  bool ready() const { return gpu.l1 != nullptr; }
  tiers::BlockPool& gpu_pool() { return *gpu.l1; }
  // CudaModel::forward, as the scheduler calls it.
  std::expected<std::span<const float>, std::string> gpu_forward(
      std::span<const Model::Chunk> batch, tiers::BlockPool& pool) {
    return gpu.forward.run(batch, pool, {});
  }

  // One chunk alone on the CPU or the GPU; its logits rows.
  std::vector<float> cpu_run(SequenceKv& kv, std::span<const int> tokens, bool all_logits) {
    EXPECT_TRUE(kv.reserve(cpu_pool, kv.length() + static_cast<int>(tokens.size())));
    const Model::Chunk chunk{&kv, tokens, all_logits};
    auto logits = model.forward(std::span(&chunk, 1), cpu_pool);
    EXPECT_TRUE(logits.has_value()) << logits.error();
    return logits ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>{};
  }
  std::vector<float> gpu_run(SequenceKv& kv, std::span<const int> tokens, bool all_logits) {
    EXPECT_TRUE(kv.reserve(gpu_pool(), kv.length() + static_cast<int>(tokens.size())));
    const Model::Chunk chunk{&kv, tokens, all_logits};
    auto logits = gpu_forward(std::span(&chunk, 1), gpu_pool());
    EXPECT_TRUE(logits.has_value()) << logits.error();
    return logits ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>{};
  }

  Gpt2Model model;
  tiers::BlockPool cpu_pool;
  Device gpu;
};

// Largest |a - b| relative to the largest |a|.
double relative_gap(std::span<const float> a, std::span<const float> b) {
  double gap = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
  }
  return gap / scale;
}

// Prefill with all logits, then greedy decode fed the CPU's tokens: every
// row within tolerance of the CPU's and every greedy token the same.
void expect_gpu_follows_cpu(Twin& t, const std::vector<int>& prompt, int decode_steps) {
  const int V = t.model.config().vocab_size;
  SequenceKv cpu_kv(Twin::kPage), gpu_kv(Twin::kPage);
  auto want = t.cpu_run(cpu_kv, prompt, true);
  auto got = t.gpu_run(gpu_kv, prompt, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(relative_gap(want, got), 1e-4) << "prefill";
  for (std::size_t r = 0; r < prompt.size(); ++r)
    EXPECT_EQ(argmax(std::span(got).subspan(r * V, V)), argmax(std::span(want).subspan(r * V, V)))
        << "prefill row " << r;
  for (int step = 0; step < decode_steps; ++step) {
    const int next = argmax(std::span(want).last(V));
    want = t.cpu_run(cpu_kv, std::span(&next, 1), false);
    got = t.gpu_run(gpu_kv, std::span(&next, 1), false);
    EXPECT_LT(relative_gap(want, got), 1e-4) << "decode step " << step;
    EXPECT_EQ(argmax(got), argmax(want)) << "decode step " << step;
  }
  cpu_kv.release(t.cpu_pool);
  gpu_kv.release(t.gpu_pool());
}

TEST_F(CudaModelTest, FollowsTheCpuForwardOnEveryVariant) {
  for (const ModelConfig& config : tiny_variants()) {
    Twin t(Gpt2Model(config, ModelWeights::random(config, 1234)));
    ASSERT_TRUE(t.ready());
    std::mt19937 rng(7);
    expect_gpu_follows_cpu(t, random_tokens(rng, 77, config.vocab_size), 12);
    EXPECT_EQ(t.gpu_pool().num_free(), t.gpu_pool().num_blocks());
  }
}

TEST_F(CudaModelTest, FollowsTheCpuForwardOnTheBundledModels) {
  for (const char* dir : {"models/fortunes-char", "models/fortunes-char-5m",
                          "tests/data/tiny-nanogpt", "tests/data/tiny-hf"}) {
    SCOPED_TRACE(dir);
    auto model = Gpt2Model::load(std::filesystem::path(KVTIER_SOURCE_DIR) / dir);
    ASSERT_TRUE(model.has_value()) << model.error();
    Twin t(std::move(*model));
    ASSERT_TRUE(t.ready());
    std::mt19937 rng(3);
    const int n = std::min(40, t.model.config().block_size / 2);
    expect_gpu_follows_cpu(t, random_tokens(rng, n, t.model.config().vocab_size), 16);
  }
}

// On the GPU, one prefill and the same prompt in chunks of random sizes (one
// token at a time included) give the same logits at every position, bit for
// bit: chunks of different sizes take different matmul tiles.
TEST_F(CudaModelTest, ChunkingDoesNotChangeTheBits) {
  for (const ModelConfig& config : tiny_variants()) {
    Twin t(Gpt2Model(config, ModelWeights::random(config, 99)));
    ASSERT_TRUE(t.ready());
    std::mt19937 rng(42);
    const auto prompt = random_tokens(rng, 90, config.vocab_size);
    SequenceKv whole(Twin::kPage);
    const auto expected = t.gpu_run(whole, prompt, true);
    for (int trial = 0; trial < 3; ++trial) {
      SequenceKv kv(Twin::kPage);
      std::vector<float> got;
      std::uniform_int_distribution<int> size(1, trial == 0 ? 1 : 33);
      for (std::size_t begin = 0; begin < prompt.size();) {
        const std::size_t n = std::min<std::size_t>(size(rng), prompt.size() - begin);
        const auto rows = t.gpu_run(kv, std::span(prompt).subspan(begin, n), true);
        got.insert(got.end(), rows.begin(), rows.end());
        begin += n;
      }
      EXPECT_TRUE(same_bits(expected, got)) << "trial " << trial;
      kv.release(t.gpu_pool());
    }
    whole.release(t.gpu_pool());
  }
}

// Sequences alone, then together in random mixes of prefill chunks and
// decode steps in one GPU forward: every logits row the same bits.
TEST_F(CudaModelTest, BatchCompositionDoesNotChangeTheBits) {
  for (const ModelConfig& config : tiny_variants()) {
    Twin t(Gpt2Model(config, ModelWeights::random(config, 5)));
    ASSERT_TRUE(t.ready());
    auto forward = [&t](std::span<const Model::Chunk> batch) {
      return t.gpu_forward(batch, t.gpu_pool());
    };
    for (unsigned seed : {1u, 2u})
      EXPECT_TRUE(forward_test_util::batch_mixes_match_alone(forward, t.gpu_pool(), Twin::kPage,
                                                             config.vocab_size, seed, 8))
          << variant_name(config) << " seed " << seed;
    EXPECT_EQ(t.gpu_pool().num_free(), t.gpu_pool().num_blocks());
  }
}

TEST_F(CudaModelTest, RefusesBadBatchesWithTheReason) {
  const ModelConfig config = tiny_variants()[0];
  Twin t(Gpt2Model(config, ModelWeights::random(config, 5)));
  ASSERT_TRUE(t.ready());
  SequenceKv kv(Twin::kPage);
  ASSERT_TRUE(kv.reserve(t.gpu_pool(), 8));
  const std::vector<int> tokens = {1, 2, 3};
  // What the CPU refuses, with the CPU's message.
  const std::vector<int> bad = {1, config.vocab_size};
  const Model::Chunk bad_chunk{&kv, bad, false};
  auto refused = t.gpu_forward(std::span(&bad_chunk, 1), t.gpu_pool());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), t.model.check(std::span(&bad_chunk, 1), t.gpu_pool()).error());
  // Attention scores, and a KV pool in host memory.
  std::vector<kernels::AttentionScore> scores(8);
  Model::Chunk scored{&kv, tokens, false};
  scored.scores = scores.data();
  refused = t.gpu_forward(std::span(&scored, 1), t.gpu_pool());
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().find("attention scores"), std::string::npos) << refused.error();
  SequenceKv host_kv(Twin::kPage);
  ASSERT_TRUE(host_kv.reserve(t.cpu_pool, 8));
  const Model::Chunk host_chunk{&host_kv, tokens, false};
  refused = t.gpu_forward(std::span(&host_chunk, 1), t.cpu_pool);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().find("not in device memory"), std::string::npos) << refused.error();
  // Nothing advanced; a good batch then runs.
  EXPECT_EQ(kv.length(), 0);
  const Model::Chunk good{&kv, tokens, false};
  EXPECT_TRUE(t.gpu_forward(std::span(&good, 1), t.gpu_pool()).has_value());
  EXPECT_EQ(kv.length(), 3);
  kv.release(t.gpu_pool());
  host_kv.release(t.cpu_pool);
}

// Without a device, create() fails with the runtime's reason (runs anywhere
// the CUDA side is built).
TEST(CudaModelNoDevice, CreateSaysWhy) {
  if (kernels::cuda_device_present()) GTEST_SKIP() << "a CUDA device is present";
  const ModelConfig config = tiny_variants()[0];
  const Gpt2Model model(config, ModelWeights::random(config, 5));
  auto created = CudaModel::create(model);
  ASSERT_FALSE(created.has_value());
  EXPECT_NE(created.error().find("failed"), std::string::npos) << created.error();
}

}  // namespace
}  // namespace kvtier

// The nanochat forward on the GPU (engine/cuda/cuda_nanochat_model.h),
// through open_device as kvtierd gets it: against the CPU's NanochatModel on
// every generation, at n_kv_head < n_head and =, past the short windows and
// past sequence_len (logits within 1e-4 relative, greedy tokens equal), and
// batch invariance on the GPU bit for bit (chunked prefill, two sequences in
// one batch). Built only with the CUDA side; without a device every test is
// skipped with the reason.
#include "engine/cuda/cuda_nanochat_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/device.h"
#include "nanochat_test_util.h"
#include "tests/cuda_test_util.h"

namespace kvtier {
namespace {

// Skipped, with the reason, in a build that does not pick the nanochat
// forward (KVTIER_CUDA_NANOCHAT, engine/CMakeLists.txt).
class CudaNanochatModelTest : public cuda_test_util::CudaDeviceTest {
 protected:
  void SetUp() override {
#if !defined(KVTIER_CUDA_NANOCHAT)
    GTEST_SKIP() << "built without KVTIER_CUDA_NANOCHAT: open_device keeps nanochat on the CPU";
#endif
    cuda_test_util::CudaDeviceTest::SetUp();
  }
};
using nanochat_test::kShapes;
using nanochat_test::NanochatFolder;
using nanochat_test::random_tokens;
using nanochat_test::Shape;
using nanochat_test::shape_name;

constexpr int kPage = 16;

// A nanochat model with a KV pool on the host and the GPU's Device.
struct Twin {
  static constexpr int kBlocks = 64;
  explicit Twin(NanochatModel m)
      : model(std::move(m)), cpu_pool(model.kv_layout(kPage).block_bytes(), kBlocks) {
    SchedulerConfig l1;
    l1.page_size = kPage;
    l1.max_kv_tokens = kBlocks * kPage;
    auto opened = open_device(model, l1, {.kind = "cuda"});
    EXPECT_TRUE(opened.has_value()) << opened.error();
    if (opened) gpu = std::move(*opened);
  }
  bool ready() const { return gpu.l1 != nullptr; }

  // Every position's logits of `tokens`, in chunks of the given sizes
  // (cycled), on the CPU or the GPU.
  std::vector<float> run(bool on_gpu, const std::vector<int>& tokens,
                         const std::vector<int>& sizes) {
    auto forward = [&](std::span<const Model::Chunk> chunks, tiers::BlockPool& pool) {
      return on_gpu ? gpu.forward.run(chunks, pool, {}) : model.forward(chunks, pool);
    };
    return nanochat_test::run_chunked(forward, on_gpu ? *gpu.l1 : cpu_pool, kPage, tokens, sizes);
  }

  NanochatModel model;
  tiers::BlockPool cpu_pool;
  Device gpu;
};

int argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

// 300 positions (sequence_len 256, context 320, short windows of 128): the
// short layers slide and, past 256, the long ones too.
TEST_F(CudaNanochatModelTest, FollowsTheCpuForwardOnEveryGeneration) {
  const std::vector<int> tokens = random_tokens(300, 5);
  for (const Shape shape : kShapes) {
    SCOPED_TRACE(shape_name(shape));
    NanochatFolder folder(shape);
    auto model = NanochatModel::load(folder.path());
    ASSERT_TRUE(model.has_value()) << model.error();
    Twin t(std::move(*model));
    ASSERT_TRUE(t.ready());
    const auto want = t.run(false, tokens, {300});
    const auto got = t.run(true, tokens, {300});
    ASSERT_EQ(got.size(), want.size());
    const int V = t.model.config().vocab_size;
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      const auto w = std::span(want).subspan(r * V, V), g = std::span(got).subspan(r * V, V);
      double gap = 0, scale = 1e-30;
      for (int i = 0; i < V; ++i) {
        gap = std::max(gap, std::fabs(static_cast<double>(w[i]) - g[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
      }
      ASSERT_LT(gap / scale, 1e-4) << "row " << r;
      // The same greedy token unless the CPU's top two are closer than the
      // tolerance.
      std::vector<float> sorted(w.begin(), w.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 1e-4 * scale) {
        EXPECT_EQ(argmax(g), argmax(w)) << "row " << r;
      }
    }
    EXPECT_EQ(t.gpu.l1->num_free(), t.gpu.l1->num_blocks());
  }
}

TEST_F(CudaNanochatModelTest, ChunkingAndBatchingDoNotChangeTheBits) {
  const std::vector<int> tokens = random_tokens(290, 9);
  for (const Shape shape : {Shape{5, 2}, Shape{3, 4}}) {
    SCOPED_TRACE(shape_name(shape));
    NanochatFolder folder(shape);
    auto model = NanochatModel::load(folder.path());
    ASSERT_TRUE(model.has_value()) << model.error();
    Twin t(std::move(*model));
    ASSERT_TRUE(t.ready());
    const std::vector<float> whole = t.run(true, tokens, {290});
    for (const std::vector<int>& sizes : {std::vector<int>{1}, {7, 1, 33}, {128, 16}}) {
      const std::vector<float> chunked = t.run(true, tokens, sizes);
      ASSERT_EQ(chunked.size(), whole.size());
      EXPECT_EQ(0, std::memcmp(chunked.data(), whole.data(), whole.size() * sizeof(float)))
          << "chunks of " << sizes[0];
    }
    // Two sequences in one batch: each row's logits are its own alone.
    tiers::BlockPool& pool = *t.gpu.l1;
    const std::vector<int> other = random_tokens(100, 11);
    SequenceKv a(kPage), b(kPage);
    ASSERT_TRUE(a.reserve(pool, 290));
    ASSERT_TRUE(b.reserve(pool, 100));
    Model::Chunk chunks[] = {{&a, std::span(tokens).first(150), true},
                             {&b, std::span(other), true}};
    ASSERT_TRUE(t.gpu.forward.run(chunks, pool, {}).has_value());
    chunks[0] = {&a, std::span(tokens).subspan(150), true};
    chunks[0].previous_token = tokens[149];
    auto rest = t.gpu.forward.run(std::span(chunks, 1), pool, {});
    ASSERT_TRUE(rest.has_value()) << rest.error();
    const int V = t.model.config().vocab_size;
    EXPECT_EQ(0, std::memcmp(rest->data(), whole.data() + 150 * V, 140 * V * sizeof(float)));
    a.release(pool);
    b.release(pool);
  }
}

TEST_F(CudaNanochatModelTest, RefusesWhatTheCpuRefusesAndAttentionScores) {
  NanochatFolder folder({5, 2});
  auto model = NanochatModel::load(folder.path());
  ASSERT_TRUE(model.has_value()) << model.error();
  Twin t(std::move(*model));
  ASSERT_TRUE(t.ready());
  tiers::BlockPool& pool = *t.gpu.l1;
  SequenceKv kv(kPage);
  ASSERT_TRUE(kv.reserve(pool, 8));
  const std::vector<int> tokens = {1, 2, 3};
  const Model::Chunk first{&kv, tokens, false};
  ASSERT_TRUE(t.gpu.forward.run(std::span(&first, 1), pool, {}).has_value());
  // A continuing chunk without the token before it: the CPU's message.
  const Model::Chunk bad{&kv, tokens, false};
  auto refused = t.gpu.forward.run(std::span(&bad, 1), pool, {});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), t.model.check(std::span(&bad, 1), pool).error());
  std::vector<kernels::AttentionScore> scores(8);
  Model::Chunk scored{&kv, tokens, false};
  scored.previous_token = 3;
  scored.scores = scores.data();
  refused = t.gpu.forward.run(std::span(&scored, 1), pool, {});
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().find("attention scores"), std::string::npos) << refused.error();
  EXPECT_EQ(kv.length(), 3) << "a refused batch does not advance";
  kv.release(pool);
}

}  // namespace
}  // namespace kvtier

// Cache rotation (EvictionPolicy rotate=on, KvEvictor::evict with a
// KeyRotation) on a real nanochat model: after pages go, the kept keys sit
// where a sequence of the kept tokens alone would have put them, and the
// next token is rotated at the position after them. Without rotation the
// keys keep the rotation they were written with. Refused for GPT-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/kv_evictor.h"
#include "engine/model/nanochat/nanochat_model.h"
#include "forward_test_util.h"
#include "nanochat_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

constexpr int kPage = 16;

// Layer 0's key at `pos` of `kv`, head by head: (n_kv_head, D) floats.
std::vector<float> layer0_key(const Model& model, const tiers::BlockPool& pool,
                              const SequenceKv& kv, int pos) {
  const KvLayout layout = model.kv_layout(kPage);
  const auto* block = reinterpret_cast<const float*>(pool.data(kv.block_ids()[pos / kPage]));
  std::vector<float> key;
  for (int h = 0; h < layout.n_kv_head; ++h)
    for (int d = 0; d < layout.head_dim; ++d)
      key.push_back(block[(h * layout.head_dim + d) * kPage + pos % kPage]);
  return key;
}

// Prefills `tokens` into a fresh sequence of `pool`, at rotary offset 0.
SequenceKv prefill(Model& model, tiers::BlockPool& pool, const std::vector<int>& tokens,
                   KvEvictor* evictor = nullptr) {
  SequenceKv kv(kPage);
  EXPECT_TRUE(kv.reserve(pool, static_cast<int>(tokens.size())));
  const Model::Chunk chunk{&kv, tokens, false, evictor != nullptr ? evictor->scores() : nullptr};
  const auto logits = model.forward(std::span(&chunk, 1), pool);
  EXPECT_TRUE(logits.has_value()) << logits.error();
  return kv;
}

// Generation 4: no smear, so a position's layer-0 key depends on its token
// and its rotary position alone.
TEST(CacheRotationTest, KeptKeysSitWhereTheKeptTokensAloneWouldPutThem) {
  nanochat_test::NanochatFolder folder({4, 2});
  auto loaded = NanochatModel::load(folder.path());
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  NanochatModel& model = *loaded;
  tiers::BlockPool pool(model.kv_layout(kPage).block_bytes(), 32);
  const KeyRotation rotation{model.rotary(), model.kv_layout(kPage)};
  const std::vector<int> prompt = nanochat_test::random_tokens(6 * kPage + 5, 3);

  for (bool rotate : {false, true}) {
    SCOPED_TRACE(rotate ? "rotate=on" : "rotate=off");
    const EvictionPolicy policy =
        EvictionPolicy::h2o(kPage, kPage, 4 * kPage).with_rotation(rotate);
    KvEvictor evictor(policy, model.config().block_size, static_cast<int>(prompt.size()));
    SequenceKv kv = prefill(model, pool, prompt, &evictor);
    SequenceKv full = prefill(model, pool, prompt);  // the same keys, nothing evicted
    const int evicted = evictor.evict(kv, pool, &rotation);
    ASSERT_EQ(evicted, 3) << "7 pages held, 4 kept";
    EXPECT_EQ(evictor.rotary_offset(kv), rotate ? 3 * kPage : 0);

    // The kept tokens alone, contiguous.
    std::vector<int> slots, kept;
    for (int p = 0; p < kv.length(); ++p)
      if (!kv.is_evicted(p / kPage)) slots.push_back(p), kept.push_back(prompt[p]);
    SequenceKv alone = prefill(model, pool, kept);
    double rotated_off = 0, moved = 0;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const std::vector<float> ours = layer0_key(model, pool, kv, slots[i]);
      const std::vector<float> want = layer0_key(model, pool, alone, static_cast<int>(i));
      const std::vector<float> as_written = layer0_key(model, pool, full, slots[i]);
      for (std::size_t e = 0; e < ours.size(); ++e) {
        rotated_off = std::max(rotated_off, std::abs(double(ours[e]) - want[e]));
        moved = std::max(moved, std::abs(double(ours[e]) - as_written[e]));
      }
    }
    if (rotate) {
      EXPECT_LT(rotated_off, 1e-4) << "a kept key is not where the kept tokens alone put it";
      EXPECT_GT(moved, 1e-2) << "the keys after the hole turned";
    } else {
      EXPECT_EQ(moved, 0.0) << "without rotation the keys keep the rotation they were written with";
      EXPECT_GT(rotated_off, 1e-2);
    }

    // The next token: rotated at the position after the kept ones.
    const int next = 7;
    ASSERT_TRUE(kv.reserve(pool, kv.length() + 1));
    ASSERT_TRUE(alone.reserve(pool, alone.length() + 1));
    const Model::Chunk step{&kv, std::span(&next, 1),      false, nullptr, prompt.back(),
                            0,   evictor.rotary_offset(kv)};
    const Model::Chunk step_alone{&alone, std::span(&next, 1), false, nullptr, kept.back()};
    ASSERT_TRUE(model.forward(std::span(&step, 1), pool).has_value());
    ASSERT_TRUE(model.forward(std::span(&step_alone, 1), pool).has_value());
    const bool same = layer0_key(model, pool, kv, kv.length() - 1) ==
                      layer0_key(model, pool, alone, alone.length() - 1);
    EXPECT_EQ(same, rotate) << "the new key's rotary position";
    for (SequenceKv* s : {&kv, &full, &alone}) s->release(pool);
  }
  EXPECT_EQ(pool.num_free(), 32);
}

TEST(CacheRotationTest, AnOffsetIsRefusedWhereItCannotApply) {
  nanochat_test::NanochatFolder folder({4, 2});
  auto nanochat = NanochatModel::load(folder.path());
  ASSERT_TRUE(nanochat.has_value()) << nanochat.error();
  const ModelConfig config =
      forward_test_util::tiny_config(kernels::WeightLayout::kOutIn, Gelu::kErf, true, 4);
  Gpt2Model gpt2(config, ModelWeights::random(config, 1));
  const int tokens[] = {1, 2, 3};
  for (Model* model : {static_cast<Model*>(&*nanochat), static_cast<Model*>(&gpt2)}) {
    tiers::BlockPool pool(model->kv_layout(kPage).block_bytes(), 4);
    SequenceKv kv(kPage);
    ASSERT_TRUE(kv.reserve(pool, 3));
    const Model::Chunk beyond{&kv, tokens, false, nullptr, -1, 0, 1};  // past kv->length() 0
    auto refused = model->forward(std::span(&beyond, 1), pool);
    ASSERT_FALSE(refused.has_value());
    EXPECT_TRUE(test_util::contains(refused.error(), model->rotary() != nullptr
                                                         ? "rotary offset 1 outside [0, 0]"
                                                         : "positions are not rotary"))
        << refused.error();
    kv.release(pool);
  }
  const EvictionPolicy rotating = EvictionPolicy::h2o(16, 16, 64).with_rotation(true);
  // The shape's fact (what a front door reads from the folder alone) is the
  // model's.
  EXPECT_TRUE(nanochat->config().rotary);
  EXPECT_NE(nanochat->rotary(), nullptr);
  EXPECT_FALSE(gpt2.config().rotary);
  EXPECT_EQ(gpt2.rotary(), nullptr);
  EXPECT_TRUE(rotating.check_rotation(nanochat->config()));
  EXPECT_TRUE(EvictionPolicy::h2o(16, 16, 64).check_rotation(gpt2.config()));
  const auto refused = rotating.check_rotation(gpt2.config());
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(test_util::contains(refused.error(), "gpt2 model's positions are learned"))
      << refused.error();
}

}  // namespace
}  // namespace kvtier

// The transfer plan: what a block takes in each tier and how its bytes move,
// for every format and for L1 in host or (stand-in) device memory.
#include "engine/cache/transfer_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kv_quant.h"
#include "stand_in_device.h"

namespace kvtier {
namespace {

// Layers of whole 4 KiB pages: 2 heads x 16 dims x 16 positions x 2 (K, V)
// x 4 bytes = 4 KiB a layer.
constexpr KvLayout kLayout{
    .n_layer = 3, .n_kv_head = 2, .head_dim = 16, .page_size = 16, .windows = {}};

// A configuration with an L3 (store_tiers() opens nothing: the path is
// never touched).
CacheConfig with_l3() {
  CacheConfig config;
  config.l3_path = "/nonexistent/l3";
  return config;
}

TransferPlan plan_for(tiers::BlockPool& l1, const CacheConfig& config) {
  return make_transfer_plan(kLayout, l1, config, store_tiers(config), {});
}

std::vector<float> block_values() {
  std::vector<float> v(kLayout.block_bytes() / sizeof(float));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i));
  return v;
}

TEST(TransferPlanTest, WithoutStoreTiersThereIsNoStoreLeg) {
  tiers::BlockPool l1(kLayout.block_bytes(), 2, tiers::Memory::kPageAligned);
  const TransferPlan plan = plan_for(l1, CacheConfig{});
  EXPECT_EQ(plan.stored_bytes(Tier::kL3), 0u);
  EXPECT_FALSE(plan.store[Tier::kL3].staged());
}

// A store that can read in a piece per layer only when layers are whole
// multiples of its alignment: 4 KiB layers tile for 4096, not for 8192.
TEST(TransferPlanTest, AStoresAlignmentAndPartsDecideReadsByLayer) {
  tiers::BlockPool l1(kLayout.block_bytes(), 2, tiers::Memory::kPageAligned);
  StoreTierSpec spec;
  spec.tier = Tier::kL3;
  spec.alignment = 4096;
  spec.max_parts = 64;
  EXPECT_EQ(make_transfer_plan(kLayout, l1, {}, {&spec, 1}, {}).store[Tier::kL3].parts,
            kLayout.n_layer);
  spec.alignment = 8192;
  EXPECT_EQ(make_transfer_plan(kLayout, l1, {}, {&spec, 1}, {}).store[Tier::kL3].parts, 1);
  spec.alignment = 4096;
  spec.max_parts = 1;
  EXPECT_EQ(make_transfer_plan(kLayout, l1, {}, {&spec, 1}, {}).store[Tier::kL3].parts, 1);
}

TEST(TransferPlanTest, ExactTiersOnAHostL1CopyAndReadL3InPlaceByLayer) {
  tiers::BlockPool l1(kLayout.block_bytes(), 2, tiers::Memory::kPageAligned);
  const TransferPlan plan = plan_for(l1, with_l3());
  EXPECT_EQ(plan.stored_bytes(Tier::kL1), kLayout.block_bytes());
  EXPECT_EQ(plan.stored_bytes(Tier::kL2), kLayout.block_bytes());
  EXPECT_EQ(plan.stored_bytes(Tier::kL3), kLayout.block_bytes());
  EXPECT_FALSE(plan.store[Tier::kL3].staged());
  EXPECT_EQ(plan.store[Tier::kL3].parts, kLayout.n_layer);
  EXPECT_EQ(plan.l2_layers, 1);  // between host pools a copy is a core's work: whole
  // copy_block moves whole cache lines with streaming stores: pool blocks,
  // as in the cache.
  const auto values = block_values();
  const std::size_t bytes = kLayout.block_bytes();
  tiers::BlockPool l2(bytes, 1, tiers::Memory::kPageAligned);
  std::memcpy(l1.data(0), values.data(), bytes);
  plan.to_l2(l2.data(0), l1.data(0));
  plan.from_l2(l1.data(1), l2.data(0));
  EXPECT_EQ(std::memcmp(l1.data(1), values.data(), bytes), 0);
}

TEST(TransferPlanTest, WithoutLoadByLayerEverythingMovesWhole) {
  test_util::StandInDevice device;
  tiers::BlockPool l1(kLayout.block_bytes(), 2, device.region(2 * kLayout.block_bytes(), true));
  CacheConfig config = with_l3();
  config.load_by_layer = false;
  const TransferPlan plan = plan_for(l1, config);
  EXPECT_EQ(plan.l2_layers, 1);
  EXPECT_EQ(plan.store[Tier::kL3].parts, 1);
  EXPECT_TRUE(plan.store[Tier::kL3].staged());  // O_DIRECT cannot reach device memory
}

TEST(TransferPlanTest, ADeviceL1PromotesFromAnExactL2ALayerAtATime) {
  test_util::StandInDevice device;
  tiers::BlockPool l1(kLayout.block_bytes(), 2, device.region(2 * kLayout.block_bytes(), true));
  const TransferPlan plan = plan_for(l1, with_l3());
  EXPECT_EQ(plan.l2_layers, kLayout.n_layer);
  ASSERT_TRUE(plan.layer_copy);
  EXPECT_EQ(plan.store[Tier::kL3].parts, 1);  // staged blocks are read whole
  const auto src = block_values();
  std::vector<float> host(src.size());
  plan.store[Tier::kL3].encode(reinterpret_cast<std::byte*>(host.data()),
                               reinterpret_cast<const std::byte*>(src.data()));
  EXPECT_EQ(host, src);
  EXPECT_GT(device.copies, 0);  // through the device's own copy
}

TEST(TransferPlanTest, Int8TiersStoreTheEncodingAndDecodeWithinItsBound) {
  tiers::BlockPool l1(kLayout.block_bytes(), 2, tiers::Memory::kPageAligned);
  CacheConfig config = with_l3();
  config.l2_format = config.l3_format = KvFormat::kInt8;
  const TransferPlan plan = plan_for(l1, config);
  const std::size_t int8 = kernels::kv_quant_bytes(kLayout.shape());
  EXPECT_LT(int8, kLayout.block_bytes() / 3);
  EXPECT_EQ(plan.stored_bytes(Tier::kL2), int8);
  EXPECT_EQ(plan.stored_bytes(Tier::kL3), int8);
  EXPECT_TRUE(plan.store[Tier::kL3].staged());
  EXPECT_EQ(plan.store[Tier::kL3].parts, 1);
  const auto src = block_values();
  std::vector<std::byte> encoded(int8);
  std::vector<float> back(src.size());
  plan.to_l2(encoded.data(), reinterpret_cast<const std::byte*>(src.data()));
  plan.from_l2(reinterpret_cast<std::byte*>(back.data()), encoded.data());
  // One scale per layer, K|V and head, over values in [-1, 1]: within half a
  // step of 1/127, and not the same bytes.
  for (std::size_t i = 0; i < src.size(); ++i) EXPECT_NEAR(back[i], src[i], 0.5f / 127 + 1e-6f);
  EXPECT_NE(back, src);
}

}  // namespace
}  // namespace kvtier

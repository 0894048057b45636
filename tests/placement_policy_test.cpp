// The placement policy's victim queries on their own, over a real tree and
// real pools: LRU order, what each query passes over (requests' references,
// loads, pins, holds, moves in flight, the admission being protected) and
// the order of the L2 victims' costs.
#include "engine/cache/placement_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/cache/block_hash.h"

namespace kvtier {
namespace {

constexpr int P = 4;

class PlacementPolicyTest : public ::testing::Test {
 protected:
  PlacementPolicyTest() : l1_(64, 8), l2_(64, 4), tree_(P), policy_(tree_, &l2_) {
    tree_.track_l1(l1_);
  }

  // A first block of its own (tokens {id, id, id, id}) in one slot of
  // `pool`'s, used at the next time: in L1 with the cache's one reference,
  // or in L2 only.
  CacheNode* cached(int id, Tier tier, tiers::BlockPool& pool) {
    const std::vector<int> tokens(P, id);
    CacheNode* n = tree_.insert(root_, nullptr, tokens);
    tree_.set(n, tier, {Presence::kStored, *pool.allocate()});
    tree_.touch(std::vector<CacheNode*>{n});
    return n;
  }
  CacheNode* cached_l1(int id) { return cached(id, Tier::kL1, l1_); }
  CacheNode* cached_l2(int id) { return cached(id, Tier::kL2, l2_); }

  tiers::BlockKey root_ = root_key(7, "");
  tiers::BlockPool l1_, l2_;  // before the tree, which observes l1_ until it goes
  RadixCache tree_;
  PlacementPolicy policy_;
};

TEST_F(PlacementPolicyTest, TheL1VictimIsTheLeastRecentlyUsedBlockNoOneElseHolds) {
  CacheNode* a = cached_l1(1);
  CacheNode* b = cached_l1(2);
  CacheNode* c = cached_l1(3);
  EXPECT_EQ(policy_.l1_victim(), a);
  l1_.add_ref(a->slot(Tier::kL1));  // a request shares it
  EXPECT_EQ(policy_.l1_victim(), b);
  tree_.set(b, Tier::kL1, {Presence::kLoading, b->slot(Tier::kL1)});  // bytes on the way up
  EXPECT_EQ(policy_.l1_victim(), c);
  EXPECT_EQ(policy_.demotable_l1(), 1);
  EXPECT_EQ(policy_.l1_next_victims(8), (std::vector<CacheNode*>{c}));
  l1_.release(a->slot(Tier::kL1));
  tree_.set(b, Tier::kL1, {Presence::kStored, b->slot(Tier::kL1)});
  EXPECT_EQ(policy_.l1_next_victims(2), (std::vector<CacheNode*>{a, b}));
}

TEST_F(PlacementPolicyTest, TheAdmissionInProgressIsNotDemotedForItself) {
  CacheNode* a = cached_l1(1);
  CacheNode* b = cached_l1(2);
  tree_.touch(std::vector<CacheNode*>{a});  // matched by the admission now running
  policy_.protect(tree_.now());
  EXPECT_EQ(policy_.l1_victim(), b);
  tree_.touch(std::vector<CacheNode*>{b});
  policy_.protect(tree_.now());
  EXPECT_EQ(policy_.l1_victim(), a);
  policy_.unprotect();
  EXPECT_EQ(policy_.l1_victim(), a);
}

TEST_F(PlacementPolicyTest, APinnedBlockLeavesL1OnlyForL2) {
  CacheNode* a = cached_l1(1);
  a->pins = 1;
  EXPECT_EQ(policy_.l1_victim(), a);  // L2 has free slots
  std::vector<CacheNode*> full;
  for (int i = 0; i < 4; ++i) full.push_back(cached_l2(10 + i));
  for (CacheNode* n : full) n->pins = 1;  // and none may leave
  EXPECT_EQ(policy_.l1_victim(), nullptr);
  full[2]->pins = 0;
  EXPECT_EQ(policy_.l1_victim(), a);
  EXPECT_EQ(policy_.flushable(Tier::kL1), nullptr);  // flush keeps pins
}

TEST_F(PlacementPolicyTest, L2VictimsGoCheapestLossFirst) {
  CacheNode* only_l2 = cached_l2(1);
  CacheNode* also_l3 = cached_l2(2);
  tree_.set(also_l3, Tier::kL3, {Presence::kStored});
  CacheNode* also_l1 = cached_l2(3);
  tree_.set(also_l1, Tier::kL1, {Presence::kStored, *l1_.allocate()});
  using enum PlacementPolicy::L2Victims;
  EXPECT_EQ(policy_.l2_victim(kInStore), also_l3);
  EXPECT_EQ(policy_.l2_victim(kWithCopy), also_l3);
  tree_.set(also_l3, Tier::kL3, {Presence::kWriting});  // a write from its slot in flight
  EXPECT_EQ(policy_.l2_victim(kInStore), nullptr);
  EXPECT_EQ(policy_.l2_victim(kWithCopy), also_l1);
  EXPECT_EQ(policy_.l2_clean_victim(), nullptr);
  EXPECT_EQ(policy_.l2_last_resort(), only_l2);
  only_l2->holds = 1;  // a swapped request waits for it
  EXPECT_EQ(policy_.l2_last_resort(), also_l1);
  also_l1->hit_tier = Tier::kL2;  // a promotion out of its slot in flight
  tree_.set(also_l1, Tier::kL1, {Presence::kLoading, also_l1->slot(Tier::kL1)});
  EXPECT_EQ(policy_.l2_last_resort(), only_l2);  // held, but the only one left
  EXPECT_EQ(policy_.flushable(Tier::kL2), nullptr);
}

TEST_F(PlacementPolicyTest, WriteBackTakesL2BlocksNotOnL3InLruOrder) {
  CacheNode* a = cached_l2(1);
  CacheNode* b = cached_l2(2);
  EXPECT_EQ(policy_.l2_unwritten(Tier::kL3), a);
  tree_.set(a, Tier::kL3, {Presence::kWriting});
  EXPECT_EQ(policy_.l2_unwritten(Tier::kL3), b);
  tree_.set(b, Tier::kL3, {Presence::kStored});
  EXPECT_EQ(policy_.l2_unwritten(Tier::kL3), nullptr);
  EXPECT_EQ(policy_.flushable(Tier::kL3), b);
  b->holds = 1;
  EXPECT_EQ(policy_.flushable(Tier::kL3), nullptr);
}

}  // namespace
}  // namespace kvtier

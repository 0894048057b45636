// The prefix tree on its own: chained keys, matching, insertion, LRU order
// per tier, and the erasure of nodes that hold nothing.
#include "engine/cache/radix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/cache/block_hash.h"

namespace kvtier {
namespace {

constexpr int P = 4;

std::vector<int> seq(int n, int start = 0) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Inserts the full blocks of tokens, giving block i the L1 id base + i.
std::vector<CacheNode*> insert_all(RadixCache& tree, const tiers::BlockKey& root,
                                   const std::vector<int>& tokens, int base) {
  std::vector<CacheNode*> path;
  CacheNode* parent = nullptr;
  for (std::size_t i = 0; (i + 1) * P <= tokens.size(); ++i) {
    CacheNode* n = tree.insert(root, parent, std::span(tokens).subspan(i * P, P));
    if (!n->in(Tier::kL1)) tree.set(n, Tier::kL1, {Presence::kStored, base + static_cast<int>(i)});
    path.push_back(n);
    parent = n;
  }
  tree.touch(path);
  return path;
}

TEST(BlockHashTest, KeysChainTheWholePrefixAndTheSalt) {
  const auto root = root_key(42, "");
  const std::vector<int> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  EXPECT_EQ(chain_key(root, a), chain_key(root, a));
  EXPECT_NE(chain_key(root, a), chain_key(root, b));
  // The same block after a different parent is a different block.
  EXPECT_NE(chain_key(chain_key(root, a), a), chain_key(chain_key(root, b), a));
  EXPECT_NE(root_key(42, ""), root_key(42, "tenant-a"));
  EXPECT_NE(root_key(42, "tenant-a"), root_key(43, "tenant-a"));
  EXPECT_EQ(tiers::to_hex({0x0123456789abcdefULL, 0xfULL}), "0123456789abcdef000000000000000f");
}

TEST(BlockHashTest, ChainKeysAreTheWholeBlocksKeysInOrder) {
  const auto root = root_key(42, "");
  const std::vector<int> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 2 whole blocks of 4, then 1
  const auto keys = chain_keys(root, tokens, 4);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], chain_key(root, std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(keys[1], chain_key(keys[0], std::vector<int>{5, 6, 7, 8}));
  EXPECT_EQ(chain_keys(root, std::span(tokens).first(8), 4), keys);
  EXPECT_TRUE(chain_keys(root, std::span(tokens).first(3), 4).empty());
}

TEST(RadixCacheTest, MatchesTheLongestCachedRunOfFullBlocks) {
  RadixCache tree(P);
  const auto root = root_key(1, "");
  const std::vector<int> prompt = seq(11);  // 2 full blocks + 3 tokens
  const auto path = insert_all(tree, root, prompt, 0);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(tree.size(), 2u);

  EXPECT_EQ(tree.match(root, prompt, 100), path);
  EXPECT_EQ(tree.match(root, prompt, 1).size(), 1u);
  // Diverging in the second block matches only the first.
  std::vector<int> other = prompt;
  other[5] = 99;
  EXPECT_EQ(tree.match(root, other, 100).size(), 1u);
  // Another salt shares nothing.
  EXPECT_TRUE(tree.match(root_key(1, "x"), prompt, 100).empty());
  // Inserting a sibling branch shares the first node.
  const auto branch = insert_all(tree, root, other, 10);
  EXPECT_EQ(branch[0], path[0]);
  EXPECT_NE(branch[1], path[1]);
  EXPECT_EQ(path[0]->children, 2);
  EXPECT_EQ(tree.size(), 3u);
}

TEST(RadixCacheTest, LruIsPerTierOldestFirstLeavesBeforeParents) {
  RadixCache tree(P);
  const auto root = root_key(1, "");
  const auto old_path = insert_all(tree, root, seq(8, 100), 0);
  const auto new_path = insert_all(tree, root, seq(8, 200), 2);
  auto any = [](const CacheNode&) { return true; };
  // Oldest path first, and within it the deeper node.
  EXPECT_EQ(tree.lru(Tier::kL1, any), old_path[1]);
  tree.touch(old_path);
  EXPECT_EQ(tree.lru(Tier::kL1, any), new_path[1]);
  EXPECT_EQ(tree.lru(Tier::kL2, any), nullptr);
  tree.set(new_path[1], Tier::kL2, {Presence::kStored, 7});
  EXPECT_EQ(tree.count(Tier::kL2), 1u);
  EXPECT_EQ(tree.lru(Tier::kL2, any), new_path[1]);
  // The predicate skips nodes.
  EXPECT_EQ(tree.lru(Tier::kL1, [&](const CacheNode& n) { return &n != new_path[1]; }),
            new_path[0]);
}

TEST(RadixCacheTest, NodesHoldingNothingAreErasedLeafFirst) {
  RadixCache tree(P);
  const auto root = root_key(1, "");
  const std::vector<int> prompt = seq(8);
  auto path = insert_all(tree, root, prompt, 0);
  // A parent without bytes but with a child stays, as a ghost that stops matches.
  tree.set(path[0], Tier::kL1, {});
  EXPECT_EQ(tree.size(), 2u);
  EXPECT_TRUE(tree.match(root, prompt, 100).empty());
  // A held leaf stays until the hold goes.
  path[1]->holds = 1;
  tree.set(path[1], Tier::kL1, {});
  EXPECT_EQ(tree.size(), 2u);
  path[1]->holds = 0;
  tree.prune(path[1]);  // the leaf and then its empty parent go
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.count(Tier::kL1), 0u);
}

TEST(RadixCacheTest, L3OnlyNodesMatchAndMoveBetweenTierIndexes) {
  RadixCache tree(P);
  const auto root = root_key(1, "");
  const std::vector<int> prompt = seq(8);
  auto path = insert_all(tree, root, prompt, 0);
  tree.set(path[0], Tier::kL3, {Presence::kStored});
  tree.set(path[1], Tier::kL3, {Presence::kStored});
  tree.set(path[1], Tier::kL1, {});
  tree.set(path[0], Tier::kL1, {});
  EXPECT_EQ(tree.count(Tier::kL1), 0u);
  EXPECT_EQ(tree.count(Tier::kL3), 2u);
  const auto m = tree.match(root, prompt, 100);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]->best_tier(), Tier::kL3);
  tree.set(path[1], Tier::kL3, {});
  EXPECT_EQ(tree.size(), 1u);
}

TEST(RadixCacheTest, ATierListsWhatItHoldsOrLoadsNotWhatIsOnItsWayIn) {
  RadixCache tree(P);
  const auto root = root_key(1, "");
  const auto tokens = seq(P);
  CacheNode* n = tree.insert(root, nullptr, tokens);
  // A write to L3 in flight: not in L3 yet, and it keeps the node.
  tree.set(n, Tier::kL3, {Presence::kWriting});
  EXPECT_TRUE(n->writing(Tier::kL3));
  EXPECT_FALSE(n->resident());
  EXPECT_EQ(tree.count(Tier::kL3), 0u);
  EXPECT_EQ(tree.size(), 1u);
  EXPECT_TRUE(tree.match(root, tokens, 1).empty());  // nothing to serve
  // A promotion into L1: the block is the node's, its bytes not yet usable.
  n->hit_tier = Tier::kL2;
  tree.set(n, Tier::kL1, {Presence::kLoading, 5});
  EXPECT_EQ(tree.count(Tier::kL1), 1u);
  EXPECT_TRUE(n->in(Tier::kL1));
  EXPECT_FALSE(n->usable_l1());
  EXPECT_TRUE(n->moving_l2());
  tree.set(n, Tier::kL1, {Presence::kStored, 5});
  EXPECT_TRUE(n->usable_l1());
  EXPECT_FALSE(n->moving_l2());
  EXPECT_EQ(n->best_tier(), Tier::kL1);
  // The write lands: in L3's index too.
  tree.set(n, Tier::kL3, {Presence::kStored});
  EXPECT_EQ(tree.count(Tier::kL3), 1u);
  tree.set(n, Tier::kL1, {});
  EXPECT_EQ(n->best_tier(), Tier::kL3);
  tree.set(n, Tier::kL3, {});  // holds nothing now: erased
  EXPECT_EQ(tree.size(), 0u);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// Choosing a victim never walks past blocks in use: a block a request shares
// leaves its tier's idle index when the pool says so, and comes back when
// the request lets go; a load in flight and a move out of L2 do the same.
TEST(RadixCacheTest, BlocksInUseAreKeptApartFromTheIdleOnes) {
  tiers::BlockPool l1(64, 4);
  RadixCache tree(P);
  tree.track_l1(l1);
  const auto root = root_key(1, "");
  const auto a = seq(P, 0), b = seq(P, 100);
  CacheNode* na = tree.insert(root, nullptr, a);
  CacheNode* nb = tree.insert(root, nullptr, b);
  tree.set(na, Tier::kL1, {Presence::kStored, *l1.allocate()});
  tree.set(nb, Tier::kL1, {Presence::kStored, *l1.allocate()});
  tree.touch(std::vector<CacheNode*>{na});
  tree.touch(std::vector<CacheNode*>{nb});
  auto any = [](const CacheNode&) { return true; };
  EXPECT_EQ(tree.lru(Tier::kL1, any), na);
  EXPECT_EQ(tree.count_idle(Tier::kL1), 2u);

  l1.add_ref(na->slot(Tier::kL1));  // a request shares it
  EXPECT_TRUE(tree.in_use(*na, Tier::kL1));
  EXPECT_EQ(tree.lru(Tier::kL1, any), nb);
  EXPECT_EQ(tree.count_idle(Tier::kL1), 1u);
  EXPECT_EQ(tree.count(Tier::kL1), 2u);
  EXPECT_TRUE(tree.check_indexes().has_value());
  l1.release(na->slot(Tier::kL1));
  EXPECT_EQ(tree.lru(Tier::kL1, any), na);

  // Promoted out of L2: in use in L2 (its slot must stay) and in L1 until
  // it lands.
  CacheNode* nc = tree.insert(root, nullptr, seq(P, 200));
  tree.set(nc, Tier::kL2, {Presence::kStored, 0});
  EXPECT_EQ(tree.lru(Tier::kL2, any), nc);
  nc->hit_tier = Tier::kL2;
  tree.set(nc, Tier::kL1, {Presence::kLoading, *l1.allocate()});
  EXPECT_EQ(tree.lru(Tier::kL2, any), nullptr);
  EXPECT_TRUE(tree.in_use(*nc, Tier::kL1));
  EXPECT_TRUE(tree.check_indexes().has_value());
  tree.set(nc, Tier::kL1, {Presence::kStored, nc->slot(Tier::kL1)});
  EXPECT_EQ(tree.lru(Tier::kL2, any), nc);
  EXPECT_FALSE(tree.in_use(*nc, Tier::kL1));
  EXPECT_TRUE(tree.check_indexes().has_value());
}

// A change of state made behind the tree's back is found by the check.
TEST(RadixCacheTest, CheckIndexesFindsAStateTheTreeWasNotToldOf) {
  RadixCache tree(P);
  CacheNode* n = tree.insert(root_key(1, ""), nullptr, seq(P));
  tree.set(n, Tier::kL1, {Presence::kStored, 0});
  ASSERT_TRUE(tree.check_indexes().has_value());
  n->at[Tier::kL1].state = Presence::kLoading;  // not through set()
  const auto checked = tree.check_indexes();
  ASSERT_FALSE(checked.has_value());
  EXPECT_NE(checked.error().find("in use in l1"), std::string::npos) << checked.error();
  n->at[Tier::kL1].state = Presence::kStored;
}

}  // namespace
}  // namespace kvtier

#include "engine/cache/placement_policy.h"

namespace kvtier {

bool PlacementPolicy::can_demote(const CacheNode& n) const {
  if (!unused_l1(n)) return false;  // a request, a load or a write holds it
  if (protected_stamp_ && n.last_use == *protected_stamp_) return false;
  if (n.pins == 0 || n.stored(Tier::kL2)) return true;
  // A pinned block may leave L1 only for L2.
  return l2_ && (l2_->num_free() > 0 || tree_->lru(Tier::kL2, [this](const CacheNode& m) {
           return movable_l2(m);
         }) != nullptr);
}

CacheNode* PlacementPolicy::l1_victim() const {
  return tree_->lru(Tier::kL1, [this](const CacheNode& m) { return can_demote(m); });
}

std::vector<CacheNode*> PlacementPolicy::l1_next_victims(std::size_t n) const {
  return tree_->lru_n(Tier::kL1, n, [this](const CacheNode& m) { return unused_l1(m); });
}

int PlacementPolicy::demotable_l1() const {
  // Exactly the L1 blocks not in use (RadixCache::in_use): no walk.
  return static_cast<int>(tree_->count_idle(Tier::kL1));
}

CacheNode* PlacementPolicy::l2_victim(L2Victims victims) const {
  // Cheapest loss first: a block a store (or L1) also has.
  if (victims == L2Victims::kInStore)
    return tree_->lru(Tier::kL2, [this](const CacheNode& m) {
      return movable_l2(m) && m.in_store() && !m.in(Tier::kL1);
    });
  return tree_->lru(Tier::kL2, [this](const CacheNode& m) {
    return movable_l2(m) && (m.in_store() || m.in(Tier::kL1));
  });
}

CacheNode* PlacementPolicy::l2_clean_victim() const {
  return tree_->lru(Tier::kL2,
                    [this](const CacheNode& m) { return movable_l2(m) && m.in_store(); });
}

CacheNode* PlacementPolicy::l2_last_resort() const {
  if (CacheNode* n = tree_->lru(
          Tier::kL2, [this](const CacheNode& m) { return movable_l2(m) && m.holds == 0; }))
    return n;
  return tree_->lru(Tier::kL2, [this](const CacheNode& m) { return movable_l2(m); });
}

CacheNode* PlacementPolicy::l2_unwritten(Tier store) const {
  return tree_->lru(Tier::kL2,
                    [store](const CacheNode& m) { return m.state(store) == Presence::kNone; });
}

CacheNode* PlacementPolicy::flushable(Tier tier) const {
  switch (tier) {
    case Tier::kL1:
      return tree_->lru(Tier::kL1, [this](const CacheNode& m) { return flushable_l1(m); });
    case Tier::kL2:
      return tree_->lru(Tier::kL2,
                        [this](const CacheNode& m) { return movable_l2(m) && m.holds == 0; });
    default:  // a store tier
      return tree_->lru(tier, [this, tier](const CacheNode& m) {
        return m.holds == 0 && !tree_->in_use(m, tier);
      });
  }
}

std::vector<CacheNode*> PlacementPolicy::l1_flushable(std::size_t n) const {
  return tree_->lru_n(Tier::kL1, n, [this](const CacheNode& m) { return flushable_l1(m); });
}

}  // namespace kvtier

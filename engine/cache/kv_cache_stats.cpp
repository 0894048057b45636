// KvCache's reports: stats, the tree summary, references and invariants.
#include <algorithm>
#include <unordered_map>

#include "engine/cache/kv_cache.h"
#include "engine/cache/kv_cache_stores.h"

namespace kvtier {

void KvCache::count(const LayerLoad::Counted& c, int sign) {
  stats_.lookups += sign;
  for (int t = 0; t < kNumTiers; ++t) stats_.tier[t].hits += sign * c.hits[t];
  stats_.missed_blocks += sign * c.missed;
  stats_.skipped_loads += sign * c.skipped;
  stats_.recompute_tokens_avoided += sign * c.tokens;
}

std::vector<int> KvCache::l1_ref_counts() const {
  std::vector<int> refs = l1_io_refs_;
  for (const CacheNode* n : tree_.nodes())
    if (n->in(Tier::kL1)) ++refs[static_cast<std::size_t>(n->slot(Tier::kL1))];
  return refs;
}

CacheStats KvCache::stats() const {
  CacheStats s = stats_;
  s.nodes = tree_.size();
  s.costs = costs_.costs();
  s.tier[Tier::kL1].capacity_blocks = static_cast<std::size_t>(l1_->num_blocks());
  s.tier[Tier::kL1].slot_bytes = l1_->block_bytes();
  s.tier[Tier::kL1].used_blocks = static_cast<std::size_t>(l1_->num_blocks() - l1_->num_free());
  if (l2_) {
    const tiers::BlockPool& slots = l2_->slots();
    s.tier[Tier::kL2].capacity_blocks = static_cast<std::size_t>(slots.num_blocks());
    s.tier[Tier::kL2].used_blocks = static_cast<std::size_t>(slots.num_blocks() - slots.num_free());
    s.tier[Tier::kL2].slot_bytes = slots.block_bytes();
  } else {
    s.tier[Tier::kL2].available = false;
  }
  for (int t = static_cast<int>(kFirstStoreTier); t < kNumTiers; ++t) {
    const StoreTier* store = store_at(static_cast<Tier>(t));
    if (store == nullptr) {
      s.tier[t].available = false;
      continue;
    }
    const tiers::StoreStats st = store->store->stats();
    s.tier[t].capacity_blocks = st.capacity_blocks;
    s.tier[t].used_blocks = st.used_blocks;
    s.tier[t].slot_bytes = store->store->slot_bytes();
    s.tier[t].available = st.available;
    s.tier[t].io_errors = st.io_errors;
    s.tier[t].checksum_failures = st.checksum_failures;
    s.tier[t].nodes = st.nodes;
  }
  for (int t = 0; t < kNumTiers; ++t) {
    s.tier[t].transfer = latency_[t].summary();
    s.tier[t].block_bytes = plan_.stored_bytes(static_cast<Tier>(t));
  }
  return s;
}

void KvCache::watch(std::function<void(const BlockEvent&)> listener) {
  if (!listener) {
    tree_.on_stored_change({});
    return;
  }
  tree_.on_stored_change([listener = std::move(listener)](const CacheNode& n, Tier t, bool stored) {
    listener({n.key, t, stored});
  });
}

std::vector<BlockEvent> KvCache::stored_blocks() const {
  std::vector<BlockEvent> out;
  for (const CacheNode* n : tree_.nodes())
    for (int t = 0; t < kNumTiers; ++t)
      if (n->stored(static_cast<Tier>(t))) out.push_back({n->key, static_cast<Tier>(t), true});
  return out;
}

std::string KvCache::describe(Tier tier) const {
  const CacheStats s = stats();
  if (!is_store_tier(tier)) return std::to_string(s.tier[tier].capacity_blocks) + " blocks";
  if (where_[tier].empty()) return "off";
  if (!s.tier[tier].available || !describe_[tier]) return "unavailable";
  return describe_[tier](s.tier[tier]);
}

TreeSummary KvCache::summarize(int top) const {
  TreeSummary s;
  std::unordered_map<const CacheNode*, TreeSummary::Family> families;
  for (const CacheNode* n : tree_.nodes()) {
    ++s.nodes;
    const CacheNode* first = n;
    while (first->parent != nullptr) first = first->parent;
    TreeSummary::Family& f = families[first];
    ++f.nodes;
    f.depth = std::max(f.depth, n->depth);
    for (int t = 0; t < kNumTiers; ++t) {
      s.blocks[t] += n->in(static_cast<Tier>(t));
      f.blocks[t] += n->in(static_cast<Tier>(t));
    }
    s.leaves += n->children == 0;
    s.max_depth = std::max(s.max_depth, n->depth);
    s.pinned += n->pins > 0;
    s.held += n->holds > 0;
    s.in_flight += n->loading() || n->writing_to_store();
  }
  for (auto& [first, f] : families) {
    f.first_key = tiers::to_hex(first->key);
    f.first_tokens.assign(first->tokens().begin(), first->tokens().end());
    s.largest.push_back(std::move(f));
  }
  std::sort(s.largest.begin(), s.largest.end(), [](const auto& a, const auto& b) {
    return a.nodes != b.nodes ? a.nodes > b.nodes : a.first_key < b.first_key;
  });
  if (static_cast<int>(s.largest.size()) > top) s.largest.resize(static_cast<std::size_t>(top));
  return s;
}

std::expected<void, std::string> KvCache::check_invariants() const {
  if (auto indexed = tree_.check_indexes(); !indexed) return indexed;
  std::vector<int> l2_owners(l2_ ? static_cast<std::size_t>(l2_->slots().num_blocks()) : 0, 0);
  for (const CacheNode* n : tree_.nodes()) {
    const std::string name = "cache block " + tiers::to_hex(n->key);
    const int block = n->slot(Tier::kL1), slot = n->slot(Tier::kL2);
    if (n->in(Tier::kL1) && !l1_->is_allocated(block))
      return std::unexpected(name + " names free L1 block " + std::to_string(block));
    if (n->state(Tier::kL2) != Presence::kNone) {  // stored, or a cleaning copy's
      if (!l2_ || !l2_->slots().is_allocated(slot))
        return std::unexpected(name + " names free L2 slot " + std::to_string(slot));
      if (++l2_owners[slot] > 1)
        return std::unexpected("L2 slot " + std::to_string(slot) + " belongs to two blocks");
    }
    // A copy without some layers is never copied (to L2 from L1: cleaning).
    if (n->absent_layers != 0 && (!n->in(Tier::kL1) || n->writing(Tier::kL2)))
      return std::unexpected(name + " lacks layers and is not in L1, or is being copied to L2");
    if (!n->resident() && n->children == 0 && !n->writing_any() && n->pins == 0 && n->holds == 0)
      return std::unexpected(name + " holds nothing and should have been erased");
  }
  return {};
}

}  // namespace kvtier

#include "engine/cache/radix_cache.h"

#include <algorithm>
#include <cassert>

#include "engine/cache/block_hash.h"

namespace kvtier {

std::vector<CacheNode*> RadixCache::match(const tiers::BlockKey& root, std::span<const int> tokens,
                                          int max_blocks) const {
  std::vector<CacheNode*> path;
  const int blocks = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / page_size_);
  tiers::BlockKey key = root;
  const CacheNode* parent = nullptr;
  for (int i = 0; i < blocks; ++i) {
    const auto block = tokens.subspan(static_cast<std::size_t>(i) * page_size_, page_size_);
    key = chain_key(key, block);
    CacheNode* node = find(key);
    // The key names the prefix; comparing tokens and parent guards against a
    // (practically impossible) collision serving wrong KV.
    if (node == nullptr || node->parent != parent || !node->resident() ||
        !std::ranges::equal(block, node->tokens()))
      break;
    path.push_back(node);
    parent = node;
  }
  return path;
}

CacheNode* RadixCache::find(const tiers::BlockKey& key) const {
  auto it = nodes_.find(key);
  return it == nodes_.end() ? nullptr : const_cast<CacheNode*>(&it->second);
}

CacheNode* RadixCache::insert(const tiers::BlockKey& root, CacheNode* parent,
                              std::span<const int> tokens) {
  assert(static_cast<int>(tokens.size()) == page_size_);
  const tiers::BlockKey key = chain_key(parent == nullptr ? root : parent->key, tokens);
  if (CacheNode* existing = find(key)) return existing;
  CacheNode& node = nodes_.try_emplace(key).first->second;
  node.key = key;
  node.parent = parent;
  node.token_data = std::make_unique_for_overwrite<int[]>(tokens.size());
  std::ranges::copy(tokens, node.token_data.get());
  node.token_count = static_cast<std::uint16_t>(tokens.size());
  node.depth = parent == nullptr ? 1 : parent->depth + 1;
  node.last_use = clock_;
  if (parent != nullptr) ++parent->children;
  return &node;
}

void RadixCache::touch(std::span<CacheNode* const> path) {
  ++clock_;
  for (CacheNode* n : path) {
    unindex(*n);
    n->last_use = clock_;
    index(*n);
  }
}

void RadixCache::index(CacheNode& n) {
  for (int t = 0; t < kNumTiers; ++t) {
    const Tier tier = static_cast<Tier>(t);
    if (n.in(tier)) (in_use(n, tier) ? busy_ : idle_)[t].insert(lru_key(n));
  }
}

void RadixCache::unindex(CacheNode& n) {
  for (int t = 0; t < kNumTiers; ++t) {
    if (!n.in(static_cast<Tier>(t))) continue;
    idle_[t].erase(lru_key(n));
    busy_[t].erase(lru_key(n));
  }
}

bool RadixCache::in_use(const CacheNode& n, Tier tier) const {
  switch (tier) {
    case Tier::kL1:
      return n.loading() || (l1_ != nullptr && l1_->is_shared(n.slot(Tier::kL1)));
    case Tier::kL2:
      return n.moving_l2() || n.writing_to_store();
    default:
      return n.loading();
  }
}

RadixCache::~RadixCache() {
  if (l1_ != nullptr) l1_->set_share_observer({});
}

void RadixCache::track_l1(tiers::BlockPool& l1) {
  assert(count(Tier::kL1) == 0);
  l1_ = &l1;
  l1_owner_.assign(static_cast<std::size_t>(l1.num_blocks()), nullptr);
  l1.set_share_observer([this](int block) { l1_sharing_changed(block); });
}

void RadixCache::l1_sharing_changed(int block) {
  CacheNode* n = l1_owner_[static_cast<std::size_t>(block)];
  if (n == nullptr) return;  // not (or not yet) a cached block
  unindex(*n);
  index(*n);
}

void RadixCache::set(CacheNode* node, Tier tier, Location where) {
  const bool was_stored = node->stored(tier);
  unindex(*node);
  if (tier == Tier::kL1 && l1_ != nullptr) {
    if (node->slot(Tier::kL1) >= 0)
      l1_owner_[static_cast<std::size_t>(node->slot(Tier::kL1))] = nullptr;
    if (where.state != Presence::kNone && where.slot >= 0)
      l1_owner_[static_cast<std::size_t>(where.slot)] = node;
  }
  node->at[tier] = where;
  if (tier == Tier::kL1 && where.state == Presence::kNone) node->absent_layers = 0;
  index(*node);
  if (stored_listener_ && was_stored != node->stored(tier))
    stored_listener_(*node, tier, !was_stored);
  erase_if_empty(node);
}

std::expected<void, std::string> RadixCache::check_indexes() const {
  std::size_t listed[kNumTiers] = {};
  for (const auto& [key, node] : nodes_) {
    for (int t = 0; t < kNumTiers; ++t) {
      const Tier tier = static_cast<Tier>(t);
      if (!node.in(tier)) continue;
      ++listed[t];
      const bool busy = in_use(node, tier);
      if (!(busy ? busy_ : idle_)[t].contains(lru_key(node)) ||
          (busy ? idle_ : busy_)[t].contains(lru_key(node)))
        return std::unexpected("cache block " + tiers::to_hex(key) + " is not listed as " +
                               (busy ? "in use" : "idle") + " in " + to_string(tier));
    }
  }
  for (int t = 0; t < kNumTiers; ++t)
    if (listed[t] != idle_[t].size() + busy_[t].size())
      return std::unexpected(std::string(to_string(static_cast<Tier>(t))) +
                             "'s indexes list blocks that are not there");
  return {};
}

void RadixCache::erase_if_empty(CacheNode* n) {
  while (n != nullptr && n->children == 0 && !n->resident() && !n->writing_any() && n->pins == 0 &&
         n->holds == 0) {
    CacheNode* parent = n->parent;
    if (parent != nullptr) --parent->children;
    const tiers::BlockKey key = n->key;  // not a reference into what is erased
    nodes_.erase(key);
    n = parent;
  }
}

std::vector<const CacheNode*> RadixCache::nodes() const {
  std::vector<const CacheNode*> out;
  out.reserve(nodes_.size());
  for (const auto& [key, node] : nodes_) out.push_back(&node);
  return out;
}

}  // namespace kvtier

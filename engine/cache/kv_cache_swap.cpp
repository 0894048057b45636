// KvCache's side of preemption by swap: what a swapped-out request keeps
// (holds on its full blocks, its own blocks stashed in L2 slots) and how it
// comes back. See SwapTicket (cache_handles.h).
#include "engine/cache/kv_cache.h"
#include "engine/model/sequence_kv.h"

namespace kvtier {

std::optional<int> KvCache::stash(int l1_block) {
  auto slot = alloc_l2(PlacementPolicy::L2Victims::kAny);
  if (!slot) return std::nullopt;
  move_block(l2_->slots().data(*slot), l1_->data(l1_block), plan_.to_l2, Tier::kL1, Tier::kL2);
  ++stats_.tier[Tier::kL2].demotions;
  return slot;
}

std::optional<int> KvCache::unstash(int l2_slot) {
  auto block = alloc_l1();
  if (!block) return std::nullopt;
  move_block(l1_->data(*block), l2_->slots().data(l2_slot), plan_.from_l2, Tier::kL2, Tier::kL1);
  ++stats_.tier[Tier::kL2].promotions;
  return block;
}

SwapTicket KvCache::swap_out(const tiers::BlockKey& root, std::span<const int> tokens,
                             std::span<const int> blocks, int partial, int partial_index,
                             int length, int table_size) {
  SwapTicket ticket;
  ticket.cache_ = this;
  ticket.length_ = length;
  ticket.table_size_ = table_size;
  for (const CacheNode* node : insert_path(root, tokens, blocks)) ticket.held_.push_back(node->key);
  hold(ticket.held_, +1);
  if (partial >= 0)
    if (auto slot = stash(partial)) ticket.stash_.emplace_back(partial_index, *slot);
  return ticket;
}

std::optional<SwapTicket> KvCache::swap_out_private(std::span<const int> table, int length) {
  SwapTicket ticket;
  ticket.cache_ = this;
  ticket.length_ = length;
  ticket.table_size_ = static_cast<int>(table.size());
  ticket.private_ = true;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (table[i] == SequenceKv::kEvictedBlock) continue;
    auto slot = stash(table[i]);
    if (!slot) return std::nullopt;  // the ticket lets go of what it stashed
    ticket.stash_.emplace_back(static_cast<int>(i), *slot);
  }
  return ticket;
}

std::optional<SequenceKv> KvCache::resume(PrefixLease& lease, SwapTicket* swapped, int length) {
  std::vector<std::pair<int, int>> restored;  // (block-table index, L1 block)
  if (swapped) {
    for (const auto& [index, slot] : swapped->stash_) {
      auto block = unstash(slot);
      if (!block) {
        for (const auto& [i, b] : restored) l1_->release(b);
        return std::nullopt;
      }
      restored.emplace_back(index, *block);
    }
    for (const auto& [index, slot] : swapped->stash_) l2_->slots().release(slot);
    swapped->stash_.clear();
  }
  std::vector<int> blocks = std::exchange(lease.blocks_, {});
  const bool own_table = swapped && swapped->private_;
  if (own_table && !restored.empty())
    blocks.assign(static_cast<std::size_t>(swapped->table_size_), SequenceKv::kEvictedBlock);
  for (const auto& [index, block] : restored) {
    if (own_table)
      blocks[static_cast<std::size_t>(index)] = block;
    else
      blocks.push_back(block);
  }
  return SequenceKv::adopt(layout_.page_size, std::move(blocks), length);
}

void KvCache::drop(SwapTicket& ticket) {
  hold(ticket.held_, -1);
  ticket.held_.clear();
  for (const auto& [index, slot] : ticket.stash_) l2_->slots().release(slot);
  ticket.stash_.clear();
}

}  // namespace kvtier

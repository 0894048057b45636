// KvCache's L1<->L2 moves: in the background on the block mover (promotions,
// cleaning), on the engine thread (demotions, stashes), and the waiting that
// goes with them. See kv_cache.h for the contracts.
#include <algorithm>
#include <cassert>

#include "engine/kv_cache.h"
#include "engine/kv_cache_stores.h"

namespace kvtier {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void KvCache::open_l2(std::size_t slot) {
  const int l2_blocks = static_cast<int>(config_.l2_bytes / slot);
  if (l2_blocks <= 0) {
    if (config_.l2_bytes > 0)
      warnings_.push_back("l2_bytes " + std::to_string(config_.l2_bytes) + " holds no block of " +
                          std::to_string(slot) + " bytes; no L2");
    return;
  }
  // Under an L1 in device memory, L2 lies in host memory the device copies
  // at bus speed, and exact blocks move on the device's copy queue.
  const tiers::DeviceLink* link = l1_->link();
  if (link && link->host_memory) {
    auto region = link->host_memory(slot * static_cast<std::size_t>(l2_blocks));
    if (region)
      l2_ = std::make_unique<tiers::BlockPool>(slot, l2_blocks, std::move(*region));
    else
      warnings_.push_back("L2 in the device's host memory: " + region.error() +
                          "; L2 is plain locked memory, which the device copies more slowly");
  }
  if (!l2_) {
    l2_ = std::make_unique<tiers::BlockPool>(slot, l2_blocks, tiers::Memory::kPinned);
    if (!l2_->locked()) warnings_.push_back("L2 memory is not page-locked: " + l2_->lock_error());
  }
  // The queue makes plain copies: int8 moves run the codec on the worker.
  const bool l2_on_link = l2_->memory() == tiers::Memory::kExternal;
  if (l2_on_link && config_.l2_format == KvFormat::kExact && link->copy_queue) {
    auto queue = link->copy_queue(mover_.waker());
    if (queue)
      mover_.use_queue(std::move(*queue));
    else
      warnings_.push_back("the device's copy queue: " + queue.error() +
                          "; L1<->L2 copies run on a thread");
  }
}

void KvCache::move_block(std::byte* dst, const std::byte* src, const TransferPlan::Transfer& how,
                         Tier from, Tier to) {
  const auto start = Clock::now();
  how(dst, src);
  account_copy(from, to, Clock::now() - start);
}

std::uint64_t KvCache::start_move(std::byte* dst, const std::byte* src, std::size_t bytes,
                                  const TransferPlan::Transfer& how) {
  return mover_.start(dst, src, bytes, how);
}

void KvCache::start_layer_copies(const std::vector<CacheNode*>& nodes) {
  // Layer l of every block before layer l + 1 of any: the first layers are
  // the first needed.
  const std::size_t layer_bytes = layout_.layer_bytes();
  for (int l = 0; l < plan_.l2_layers && !nodes.empty(); ++l) {
    for (CacheNode* node : nodes) {
      const std::size_t offset = static_cast<std::size_t>(l) * layer_bytes;
      const std::uint64_t ticket =
          start_move(l1_->data(node->slot(Tier::kL1)) + offset,
                     l2_->data(node->slot(Tier::kL2)) + offset, layer_bytes, plan_.layer_copy);
      moves_[ticket] = {node->key, /*up=*/true, node->slot(Tier::kL1), node->slot(Tier::kL2),
                        /*by_layer=*/true};
      LayeredMove& m = copies_by_layer_[node->key];
      m.tickets.push_back(ticket);
      m.left = plan_.l2_layers;
    }
  }
}

void KvCache::fail_queue_moves() {
  mover_.forget_lost_queue();
  for (auto it = moves_.begin(); it != moves_.end();) {
    if (!tiers::BlockMover::on_queue(it->first)) {
      ++it;
      continue;
    }
    const Move move = it->second;
    it = moves_.erase(it);
    // A block moved by layer fails once, at the first of its layers met.
    if (move.by_layer && copies_by_layer_.erase(move.key) == 0) continue;
    CacheNode* node = tree_.find(move.key);
    assert(node != nullptr && node->slot(Tier::kL1) == move.l1_block);
    if (move.up) {
      // What reached the L1 block is unknown: it leaves the cache (a request
      // that holds it by layer has its pass thrown away by settle()); the
      // L2 copy stays.
      tree_.set(node, Tier::kL1, {});
      l1_->release(move.l1_block);
    } else {
      // Cleaning: the L2 slot's bytes are unknown; the L1 block stays.
      tree_.set(node, Tier::kL2, {});
      l2_->release(move.l2_slot);
      --l1_io_refs_[static_cast<std::size_t>(move.l1_block)];
      l1_->release(move.l1_block);
    }
  }
}

void KvCache::account_copy(Tier from, Tier to, std::chrono::nanoseconds took) {
  stats_.tier[from].bytes_out += static_cast<long>(plan_.stored_bytes(from));
  stats_.tier[to].bytes_in += static_cast<long>(plan_.stored_bytes(to));
  // Filed under the lower tier: an L1<->L2 move is L2's transfer.
  latency_[std::max(static_cast<int>(from), static_cast<int>(to))].record(took);
}

void KvCache::start_cleaning() {
  if (!l2_ || l1_->num_free() >= clean_window_) return;
  // The next demotion candidates, in the order make_free_l1 takes them.
  for (CacheNode* node : policy_->l1_next_victims(static_cast<std::size_t>(clean_window_))) {
    if (node->stored(Tier::kL2) || node->moving_l2()) continue;
    const auto slot = alloc_l2(PlacementPolicy::L2Victims::kInStore);
    if (!slot) return;
    // The extra reference keeps the block (and so the node) in L1 until the
    // copy is done; the policy passes it over meanwhile.
    const int block = node->slot(Tier::kL1);
    l1_->add_ref(block);
    ++l1_io_refs_[static_cast<std::size_t>(block)];
    tree_.set(node, Tier::kL2, {Presence::kWriting, *slot});
    const std::uint64_t ticket =
        start_move(l2_->data(*slot), l1_->data(block), plan_.block_bytes, plan_.to_l2);
    moves_[ticket] = {node->key, /*up=*/false, block, *slot};
  }
}

void KvCache::finish_move(std::uint64_t ticket, std::chrono::nanoseconds latency) {
  auto it = moves_.find(ticket);
  if (it == moves_.end()) return;  // cannot happen: every copy is a move
  const Move move = it->second;
  moves_.erase(it);
  if (move.by_layer) {  // the block is up once its last layer is
    auto m = copies_by_layer_.find(move.key);
    if (--m->second.left > 0) return;
    copies_by_layer_.erase(m);
  }
  // Both kinds hold the node in L1 (loading, or an extra reference), so it
  // is still there.
  CacheNode* node = tree_.find(move.key);
  assert(node != nullptr && node->slot(Tier::kL1) == move.l1_block);
  if (move.up) {
    account_copy(Tier::kL2, Tier::kL1, latency);
    tree_.set(node, Tier::kL1, {Presence::kStored, move.l1_block});
    ++stats_.tier[Tier::kL2].promotions;
    return;
  }
  account_copy(Tier::kL1, Tier::kL2, latency);
  tree_.set(node, Tier::kL2, {Presence::kStored, move.l2_slot});
  ++stats_.tier[Tier::kL2].demotions;
  ++stats_.cleaned;
  --l1_io_refs_[static_cast<std::size_t>(move.l1_block)];
  l1_->release(move.l1_block);
}

void KvCache::poll() {
  collect();
  start_cleaning();
  start_writeback();
}

void KvCache::collect() {
  for (const tiers::CopyCompletion& c : early_) finish_move(c.ticket, c.latency);
  early_.clear();
  early_tickets_.clear();
  for (const tiers::CopyCompletion& c : mover_.poll()) finish_move(c.ticket, c.latency);
  if (mover_.queue_lost()) fail_queue_moves();
  poll_stores();
}

void KvCache::drain() {
  while (transfers_in_flight() > 0) {
    mover_.drain();
    for (const auto& s : stores_) s->store->drain();
    collect();
  }
}

std::size_t KvCache::transfers_in_flight() const { return moves_.size() + store_ops_in_flight(); }

void KvCache::await_layer(const LayerLoad& load, int layer) {
  // Copies: completions are taken from the mover but handled by the next
  // collect(); meanwhile the engine copies beside the worker. A copy the
  // lost queue had in flight never lands: collect() fails it, and settle()
  // then throws the pass away.
  auto copied = [&](std::uint64_t t) {
    return !moves_.contains(t) || early_tickets_.contains(t) ||
           (mover_.queue_lost() && tiers::BlockMover::on_queue(t));
  };
  auto take = [&] {
    for (const tiers::CopyCompletion& c : mover_.poll()) {
      early_.push_back(c);
      early_tickets_.insert(c.ticket);
    }
  };
  for (const std::vector<std::uint64_t>& copies : load.copies) {
    const std::uint64_t ticket = copies[static_cast<std::size_t>(layer)];
    for (take(); !copied(ticket); take())
      if (!mover_.help()) mover_.sleep_for_signal(std::chrono::milliseconds(1));
  }
  for (const LayerLoad::Read& read : load.reads) {
    tiers::BlockStore& store = *store_at(read.tier)->store;
    for (;;) {
      const std::optional<int> landed = store.landed(read.ticket);
      if (!landed || *landed > layer) break;
      // A submission the kernel refused leaves the pieces in the ring, and
      // nothing in flight would wake the completion thread to retry it.
      store.flush();
      mover_.sleep_for_signal(std::chrono::milliseconds(2));
    }
  }
}

bool KvCache::settle(const LayerLoad& load) {
  // Every piece has landed (the last layer waited for them); the completions
  // that carry the checksums' verdicts may still be on their way.
  auto in_flight = [&] {
    return std::any_of(load.reads.begin(), load.reads.end(),
                       [&](const LayerLoad::Read& r) { return store_pending(r); });
  };
  for (collect(); in_flight(); collect()) mover_.sleep_for_signal(std::chrono::milliseconds(2));
  std::vector<CacheNode*> landed;
  for (std::size_t i = 0; i < load.keys.size(); ++i) {
    CacheNode* node = tree_.find(load.keys[i]);
    if (node == nullptr || node->slot(Tier::kL1) != load.blocks[i] || node->loading()) {
      count(load.counted, -1);
      return false;
    }
    landed.push_back(node);
  }
  for (CacheNode* node : landed) node->hit_tier = Tier::kL1;
  return true;
}

void KvCache::wait(std::chrono::milliseconds timeout) {
  if (transfers_in_flight() == 0) return;
  // With nothing to compute, the engine's core copies beside the worker's
  // instead of sleeping: an L2 hit's promotions take half the time.
  bool helped = false;
  while (mover_.help()) helped = true;
  if (helped) return;
  mover_.sleep_for_signal(timeout);
}

}  // namespace kvtier

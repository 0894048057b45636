// KvCache's L1<->L2 moves: in the background on L2's store (promotions,
// cleaning; tiers/l2_store.h), on the engine thread (demotions, stashes), and
// the waiting for loads from L2 and the stores alike. See kv_cache.h for the
// contracts.
#include <algorithm>
#include <cassert>
#include <thread>

#include "engine/cache/kv_cache.h"
#include "engine/cache/kv_cache_stores.h"

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
  std::unique_ptr<tiers::BlockPool> slots;
  const tiers::DeviceLink* link = l1_->link();
  if (link && link->host_memory) {
    auto region = link->host_memory(slot * static_cast<std::size_t>(l2_blocks));
    if (region)
      slots = std::make_unique<tiers::BlockPool>(slot, l2_blocks, std::move(*region));
    else
      warnings_.push_back("L2 in the device's host memory: " + region.error() +
                          "; L2 is plain locked memory, which the device copies more slowly");
  }
  if (!slots) {
    slots = std::make_unique<tiers::BlockPool>(slot, l2_blocks, tiers::Memory::kPinned);
    if (!slots->locked())
      warnings_.push_back("L2 memory is not page-locked: " + slots->lock_error());
  }
  const bool l2_on_link = slots->memory() == tiers::Memory::kExternal;
  l2_ = std::make_unique<tiers::L2Store>(
      std::move(slots), wake_.waker(), [this](const std::string& why) {
        warnings_.push_back("the device's copy queue failed (" + why +
                            "): its copies in flight are thrown away, and L1<->L2 copies run "
                            "on a thread from now on");
        ++stats_.tier[Tier::kL2].io_errors;
      });
  // The queue makes plain copies: int8 moves run the codec on the worker.
  if (l2_on_link && config_.l2_format == KvFormat::kExact && link->copy_queue) {
    auto queue = link->copy_queue(wake_.waker());
    if (queue)
      l2_->use_queue(std::move(*queue));
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

void KvCache::start_l2_read(CacheNode* node) {
  std::byte* dst = l1_->data(node->slot(Tier::kL1));
  const int slot = node->slot(Tier::kL2);
  // Layers come apart where an exact slot's layers tile the block: by layer,
  // or leaving some behind (a whole copy otherwise).
  if (!plan_.layer_copy) node->absent_layers = 0;
  const std::uint64_t ticket =
      plan_.l2_layers == 1 && node->absent_layers == 0
          ? l2_->read(node->key, slot, dst, plan_.block_bytes, plan_.from_l2)
          : l2_->read(node->key, slot, dst, layout_.layer_bytes(), plan_.layer_copy,
                      layout_.n_layer, node->absent_layers);
  reads_[node->key] = {Tier::kL2, ticket, plan_.l2_layers > 1};
}

void KvCache::account_copy(Tier from, Tier to, std::chrono::nanoseconds took, std::size_t skipped) {
  stats_.tier[from].bytes_out += static_cast<long>(plan_.stored_bytes(from) - skipped);
  stats_.tier[from].bytes_skipped += static_cast<long>(skipped);
  stats_.tier[to].bytes_in += static_cast<long>(plan_.stored_bytes(to) - skipped);
  // Filed under the lower tier: an L1<->L2 move is L2's transfer.
  latency_[std::max(static_cast<int>(from), static_cast<int>(to))].record(took);
}

void KvCache::start_cleaning() {
  if (!l2_ || l1_->num_free() >= clean_window_) return;
  // The next demotion candidates, in the order make_free_l1 takes them.
  for (CacheNode* node : policy_->l1_next_victims(static_cast<std::size_t>(clean_window_))) {
    if (node->stored(Tier::kL2) || node->moving_l2() || !node->whole_l1()) continue;
    if (!start_l2_write(node, PlacementPolicy::L2Victims::kInStore)) break;
  }
  l2_->flush();
}

std::optional<std::uint64_t> KvCache::start_l2_write(CacheNode* node,
                                                     PlacementPolicy::L2Victims victims) {
  const auto slot = alloc_l2(victims);
  if (!slot) return std::nullopt;
  // The extra reference keeps the block (and so the node) in L1 until the
  // copy is done; the policy passes it over meanwhile.
  const int block = node->slot(Tier::kL1);
  l1_->add_ref(block);
  ++l1_io_refs_[static_cast<std::size_t>(block)];
  tree_.set(node, Tier::kL2, {Presence::kWriting, *slot});
  return l2_->write(node->key, *slot, l1_->data(block), plan_.block_bytes, plan_.to_l2);
}

void KvCache::copy_to_l2_now(std::span<CacheNode* const> nodes) {
  if (!l2_) return;
  for (CacheNode* node : nodes) {
    if (node->stored(Tier::kL2) || node->moving_l2() || !node->whole_l1()) continue;
    const auto ticket = start_l2_write(node, PlacementPolicy::l2_victims_for_demotion(*node));
    if (!ticket) break;
    copies_now_.insert(*ticket);
    l2_->start();  // at once: the next block's bookkeeping overlaps this copy
  }
  // Each copy is finished as it lands, so that its bookkeeping overlaps the
  // copies still in flight: the engine has nothing else to do meanwhile.
  while (!copies_now_.empty() && l2_->in_flight() > 0) {
    while (l2_->help()) {  // without a device queue the engine copies beside the worker
    }
    for (const tiers::StoreCompletion& c : l2_->poll()) finish_move(c);
    if (!copies_now_.empty()) std::this_thread::yield();
  }
  copies_now_.clear();  // every move has completed: none is left to find
}

void KvCache::finish_move(const tiers::StoreCompletion& c) {
  if (!c.is_write) reads_.erase(c.key);
  // Both kinds hold the node in L1 (loading, or an extra reference), so it
  // is still there.
  CacheNode* node = tree_.find(c.key);
  assert(node != nullptr && node->in(Tier::kL1));
  const int block = node->slot(Tier::kL1);
  const bool ok = c.status == tiers::StoreStatus::kOk;
  if (!c.is_write) {
    assert(node->state(Tier::kL1) == Presence::kLoading);
    if (!ok) {
      // What reached the L1 block is unknown: it leaves the cache (a request
      // that holds it by layer has its pass thrown away by settle()); the
      // L2 copy stays.
      tree_.set(node, Tier::kL1, {});
      l1_->release(block);
      return;
    }
    account_copy(Tier::kL2, Tier::kL1, c.latency, c.skipped_bytes);
    tree_.set(node, Tier::kL1, {Presence::kStored, block});
    ++stats_.tier[Tier::kL2].promotions;
    return;
  }
  assert(node->state(Tier::kL2) == Presence::kWriting);
  const bool cleaning = copies_now_.erase(c.ticket) == 0;
  if (ok) {
    account_copy(Tier::kL1, Tier::kL2, c.latency);
    tree_.set(node, Tier::kL2, {Presence::kStored, node->slot(Tier::kL2)});
    ++stats_.tier[Tier::kL2].demotions;
    if (cleaning) ++stats_.cleaned;
  } else {
    // The L2 slot's bytes are unknown; the L1 block stays.
    l2_->slots().release(node->slot(Tier::kL2));
    tree_.set(node, Tier::kL2, {});
  }
  --l1_io_refs_[static_cast<std::size_t>(block)];
  l1_->release(block);
}

void KvCache::poll() {
  asking_ = false;
  collect();
  start_cleaning();
  start_writeback();
}

void KvCache::collect() {
  if (l2_)
    for (const tiers::StoreCompletion& c : l2_->poll()) finish_move(c);
  poll_stores();
}

void KvCache::drain() {
  while (transfers_in_flight() > 0) {
    if (l2_) l2_->drain();
    for (const auto& s : stores_) s->store->drain();
    collect();
  }
}

std::size_t KvCache::transfers_in_flight() const {
  return (l2_ ? l2_->in_flight() : 0) + store_ops_in_flight();
}

bool KvCache::read_pending(const LayerLoad::Read& read) const {
  return read.tier == Tier::kL2 ? l2_->pending(read.ticket) : store_pending(read);
}

void KvCache::await_layer(const LayerLoad& load, int layer) {
  // Only pieces are awaited here: the tree is not touched during a forward
  // pass, and the reads' completions wait for the next collect(). A move the
  // lost queue had in flight never lands: it completes failed, and settle()
  // then throws the pass away.
  for (const LayerLoad::Read& read : load.reads_) {
    if (read.tier == Tier::kL2) {
      // Meanwhile the engine copies beside the worker.
      for (auto landed = l2_->landed(read.ticket); landed && *landed <= layer;
           landed = l2_->landed(read.ticket))
        if (!l2_->help()) wake_.sleep(std::chrono::milliseconds(1));
      continue;
    }
    tiers::BlockStore& store = *store_at(read.tier)->store;
    for (;;) {
      const std::optional<int> landed = store.landed(read.ticket);
      if (!landed || *landed > layer) break;
      // A submission the kernel refused leaves the pieces in the ring, and
      // nothing in flight would wake the completion thread to retry it.
      store.flush();
      wake_.sleep(std::chrono::milliseconds(2));
    }
  }
}

bool KvCache::arrived(const LayerLoad& load) {
  collect();
  return std::none_of(load.reads_.begin(), load.reads_.end(),
                      [&](const LayerLoad::Read& r) { return read_pending(r); });
}

bool KvCache::settle(const LayerLoad& load) {
  // Every piece has landed (the last layer waited for them); the completions
  // that carry the checksums' verdicts may still be on their way.
  auto in_flight = [&] {
    return std::any_of(load.reads_.begin(), load.reads_.end(),
                       [&](const LayerLoad::Read& r) { return read_pending(r); });
  };
  for (collect(); in_flight(); collect()) wake_.sleep(std::chrono::milliseconds(2));
  std::vector<CacheNode*> landed;
  for (std::size_t i = 0; i < load.keys_.size(); ++i) {
    CacheNode* node = tree_.find(load.keys_[i]);
    if (node == nullptr || node->slot(Tier::kL1) != load.blocks_[i] || node->loading()) {
      count(load.counted_, -1);
      return false;
    }
    landed.push_back(node);
  }
  for (CacheNode* node : landed) node->hit_tier = Tier::kL1;
  return true;
}

void KvCache::wait(std::chrono::milliseconds timeout) {
  if (transfers_in_flight() == 0 && !asking_) return;
  // With nothing to compute, the engine's core copies beside the worker's
  // instead of sleeping: an L2 hit's promotions take half the time.
  bool helped = false;
  while (l2_ && l2_->help()) helped = true;
  if (helped) return;
  wake_.sleep(timeout);
}

}  // namespace kvtier

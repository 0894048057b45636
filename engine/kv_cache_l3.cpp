// KvCache's L3 side: reads into L1, writes from L1 or L2, write-back,
// persist, and the adoption of entries a restart left in the store. See
// kv_cache.h for the contracts.
#include "engine/kv_cache_l3.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>

#include "engine/block_hash.h"
#include "engine/block_meta.h"
#include "engine/kv_cache.h"
#include "tiers/l3_store.h"

namespace kvtier {

namespace {

using Clock = std::chrono::steady_clock;

// Mixed into the L3 format tag of an int8 store, so that an exact store is
// never read as int8 or the other way round (the exact tag stays the bare
// fingerprint: stores written before formats existed remain valid).
constexpr std::uint64_t kInt8FormatTag = 0x6b762d696e743821ULL;  // "kv-int8!"

}  // namespace

void KvCache::open_l3() {
  tiers::L3Options options;
  options.path = config_.l3_path;
  options.capacity_bytes = config_.l3_bytes;
  options.block_bytes = plan_.l3_block_bytes;
  // The fingerprint covers the layout version and page size too; entries
  // of another model stay unreachable through their keys, and the tag
  // makes a store written for another block size or format start empty.
  options.format_tag =
      config_.l3_format == KvFormat::kInt8 ? fingerprint_ ^ kInt8FormatTag : fingerprint_;
  options.backoff_initial = config_.l3_backoff;
  options.on_completion = mover_.waker();
  auto store = tiers::L3Store::open(options);
  if (!store) {
    warnings_.push_back("L3 disabled: " + store.error());
    stats_.tier[Tier::kL3].available = false;
    stats_.tier[Tier::kL3].io_errors = 1;
    return;
  }
  l3_ = std::make_unique<L3Parts>();
  l3_->store = std::move(*store);
  if (plan_.l3_staged()) {
    l3_->staging = std::make_unique<tiers::BlockPool>(
        l3_->store->slot_bytes(), l1_->num_blocks() + (l2_ ? l2_->num_blocks() : 0),
        tiers::Memory::kPageAligned);
  }
  for (const std::string& w : l3_->store->warnings()) warnings_.push_back(w);
}

tiers::BlockStore& KvCache::l3_store() const { return *l3_->store; }

std::vector<std::byte> KvCache::meta_of(const CacheNode& node) const {
  const tiers::BlockKey parent = node.parent == nullptr ? tiers::BlockKey{} : node.parent->key;
  return encode_block_meta(parent, fingerprint_, node.tokens);
}

bool KvCache::l3_accepting() const { return l3_ && l3_->store->accepting(); }

std::size_t KvCache::l3_in_flight() const { return l3_ ? l3_->pending.size() : 0; }

bool KvCache::l3_pending(std::uint64_t ticket) const {
  return l3_ && l3_->pending.contains(ticket);
}

std::optional<std::uint64_t> KvCache::l3_reads_by_layer(const tiers::BlockKey& key) const {
  if (!l3_) return std::nullopt;
  auto it = l3_->reads_by_layer.find(key);
  if (it == l3_->reads_by_layer.end()) return std::nullopt;
  return it->second;
}

std::vector<CacheNode*> KvCache::match(const tiers::BlockKey& root, std::span<const int> tokens,
                                       int max_blocks) {
  const int page_size = layout_.page_size;
  const int blocks = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / page_size);
  std::vector<CacheNode*> path;
  bool adopting = l3_ != nullptr;
  tiers::BlockKey key = root;
  for (int i = 0; i < blocks; ++i) {
    const auto block = tokens.subspan(static_cast<std::size_t>(i) * page_size, page_size);
    const tiers::BlockKey parent_key = i == 0 ? tiers::BlockKey{} : key;
    key = chain_key(key, block);
    CacheNode* node = tree_.find(key);
    if (adopting && (node == nullptr || !node->resident())) {
      // Served only when it is what the key promises: this model, these
      // tokens, after this block.
      const auto record = l3_->store->lookup(key);
      if (record && record->meta == encode_block_meta(parent_key, fingerprint_, block)) {
        node = tree_.insert(root, path.empty() ? nullptr : path.back(), block);
        tree_.set(node, Tier::kL3, {Presence::kStored});
      } else {
        adopting = false;
      }
    } else if (adopting && node->stored(Tier::kL3) && !l3_->store->contains(key)) {
      // The store evicted it on its own; the tree learns it here.
      tree_.set(node, Tier::kL3, {});  // may erase the node
      node = tree_.find(key);
      adopting = false;
    }
    if (node == nullptr || !node->resident()) break;  // a ghost stops the match
    path.push_back(node);
  }
  return path;
}

void KvCache::start_l3_read(CacheNode* node) {
  // Straight into the new L1 block, or into a staging buffer that poll_l3()
  // decodes into it.
  assert(node->stored(Tier::kL3) && l3_);
  int staging = -1;
  std::byte* dst = l1_->data(node->slot(Tier::kL1));
  if (l3_->staging) {
    staging = l3_->staging->allocate().value();  // never empty: see L3Parts
    dst = l3_->staging->data(staging);
  }
  const std::uint64_t ticket = l3_->store->read(node->key, meta_of(*node), dst, plan_.l3_parts);
  l3_->pending[ticket] = {node->key, false, -1, staging, Clock::now()};
  if (plan_.l3_parts > 1) l3_->reads_by_layer[node->key] = ticket;
}

void KvCache::poll_l3() {
  for (const tiers::StoreCompletion& c : l3_->store->poll()) finish_l3(c);
  // Entries the store let go to make room: the tree forgets them too, or
  // their nodes would linger as ghosts that no lookup can serve (a soak saw
  // the tree grow by a node a request). After the completions: the store
  // commits a write on its own thread, and a later write() may evict that
  // entry before its completion is seen here. Taken first, the eviction would
  // find the node not yet on L3, and the completion then mark it there.
  for (const tiers::BlockKey& key : l3_->store->take_evicted()) {
    CacheNode* node = tree_.find(key);
    if (node == nullptr || !node->stored(Tier::kL3)) continue;
    tree_.set(node, Tier::kL3, {});  // may erase the node
    ++stats_.tier[Tier::kL3].dropped;
  }
}

void KvCache::finish_l3(const tiers::StoreCompletion& c) {
  auto it = l3_->pending.find(c.ticket);
  if (it == l3_->pending.end()) return;
  const L3Parts::Pending p = it->second;
  l3_->pending.erase(it);
  if (auto b = l3_->reads_by_layer.find(p.key);
      b != l3_->reads_by_layer.end() && b->second == c.ticket)
    l3_->reads_by_layer.erase(b);
  TierStats& t3 = stats_.tier[Tier::kL3];
  if (c.status == tiers::StoreStatus::kChecksumMismatch) ++t3.checksum_failures;
  if (c.status == tiers::StoreStatus::kIoError) ++t3.io_errors;
  CacheNode* node = tree_.find(p.key);
  // A staged read lands in staging: decoding it into the L1 block is part
  // of the promotion's time.
  std::chrono::nanoseconds latency = c.latency;
  if (!p.is_write && p.staging >= 0 && node != nullptr && c.status == tiers::StoreStatus::kOk) {
    const auto start = Clock::now();
    plan_.l3_decode(l1_->data(node->slot(Tier::kL1)), l3_->staging->data(p.staging));
    latency += Clock::now() - start;
  }
  if (p.staging >= 0) l3_->staging->release(p.staging);
  latency_[Tier::kL3].record(latency);
  if (p.is_write) {
    if (p.l1_source >= 0) {
      --l1_io_refs_[p.l1_source];
      l1_->release(p.l1_source);
    }
    if (node == nullptr) return;
    if (c.status != tiers::StoreStatus::kOk) {
      tree_.set(node, Tier::kL3, {});  // may erase the node
      return;
    }
    tree_.set(node, Tier::kL3, {Presence::kStored});
    ++t3.demotions;
    t3.bytes_in += static_cast<long>(plan_.l3_block_bytes);
    if (node->holds > 0) l3_->store->set_protected(node->key, true);
    return;
  }
  if (node == nullptr) return;  // cannot happen: a loading node holds its L1 block
  const int block = node->slot(Tier::kL1);
  if (c.status == tiers::StoreStatus::kOk) {
    tree_.set(node, Tier::kL1, {Presence::kStored, block});
    ++t3.promotions;
    t3.bytes_out += static_cast<long>(plan_.l3_block_bytes);
    return;
  }
  // A miss: the tokens will be prefilled. A corrupt entry is already gone
  // from the store; forget it here too. Still resident in L1 here, so
  // neither call can erase the node early.
  if (c.status == tiers::StoreStatus::kChecksumMismatch ||
      c.status == tiers::StoreStatus::kNotFound)
    tree_.set(node, Tier::kL3, {});
  l1_->release(block);
  tree_.set(node, Tier::kL1, {});
}

void KvCache::start_writeback() {
  // write_back: a block goes to L3 once it has left L1 (it is in L2), so by
  // the time L2 needs its slot it is usually clean and can be let go.
  if (!l3_ || !l2_ || config_.write_policy == WritePolicy::kWriteThrough) return;
  stats_.tier[Tier::kL3].available = l3_->store->accepting();
  if (!stats_.tier[Tier::kL3].available) return;
  constexpr std::size_t kMaxWritesInFlight = 256;
  while (l3_->pending.size() < kMaxWritesInFlight) {
    CacheNode* node = policy_->l2_unwritten();
    if (node == nullptr || !write_to_l3(node)) break;
  }
  l3_->store->flush();
}

int KvCache::write_down_to_l3(const std::function<bool(const CacheNode&)>& wanted) {
  if (!l3_accepting()) return 0;
  int written = 0;
  for (const CacheNode* n : tree_.nodes()) {
    CacheNode* node = const_cast<CacheNode*>(n);  // the tree's nodes are ours to change
    if (node->state(Tier::kL3) != Presence::kNone || !wanted(*node)) continue;
    if (!write_to_l3(node)) break;
    ++written;
  }
  l3_->store->flush();
  drain();
  return written;
}

bool KvCache::write_to_l3(CacheNode* node) {
  if (device_failed_) return false;
  const bool from_l2 = node->stored(Tier::kL2);
  const std::byte* src =
      from_l2 ? l2_->data(node->slot(Tier::kL2)) : l1_->data(node->slot(Tier::kL1));
  // An L2 slot in L3's format is written as it is (host memory, its slot
  // page-aligned); anything else (L1, or an exact slot for an int8 L3) is
  // encoded or copied into a staging buffer that lives until the write
  // completes.
  int staging = -1;
  const bool as_stored = from_l2 && config_.l2_format == config_.l3_format;
  if (l3_->staging && !as_stored) {
    staging = l3_->staging->allocate().value();  // never empty: see L3Parts
    plan_.l3_encode(l3_->staging->data(staging), src);
    src = l3_->staging->data(staging);
  }
  // Asked once the bytes are taken: a failure before then shows.
  if (device_failed()) {
    if (staging >= 0) l3_->staging->release(staging);
    return false;
  }
  const tiers::BlockRecord record{node->key, meta_of(*node)};
  tree_.set(node, Tier::kL3, {Presence::kWriting});
  int l1_source = -1;
  if (!from_l2) {
    // The extra reference keeps the block in L1 until the write completes
    // (and, with staging, bounds the buffers in use: see L3Parts).
    l1_source = node->slot(Tier::kL1);
    l1_->add_ref(l1_source);
    ++l1_io_refs_[static_cast<std::size_t>(l1_source)];
  }
  const std::uint64_t ticket = l3_->store->write(record, src);
  l3_->pending[ticket] = {node->key, true, l1_source, staging, Clock::now()};
  return true;
}

bool KvCache::device_failed() {
  if (device_failed_) return true;
  const tiers::DeviceLink* link = l1_->link();
  if (link == nullptr || !link->failure) return false;
  const std::string why = link->failure();
  if (why.empty()) return false;
  device_failed_ = true;
  ++stats_.tier[Tier::kL1].io_errors;
  warnings_.push_back("the device that holds L1 failed (" + why +
                      "): nothing more is written to L3, which keeps what it has");
  return true;
}

int KvCache::persist() {
  if (!l3_accepting()) {
    drain();
    return 0;
  }
  const int written =
      write_down_to_l3([](const CacheNode& n) { return n.stored(Tier::kL2) || n.usable_l1(); });
  if (auto synced = l3_->store->sync(); !synced)
    warnings_.push_back("L3 sync: " + synced.error() +
                        "; a power loss may lose blocks written since (their checksums keep "
                        "them from being served)");
  return written;
}

}  // namespace kvtier

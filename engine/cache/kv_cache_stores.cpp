// KvCache's store tiers (L3 and below, engine/cache/store_tiers.h): reads into L1,
// writes from L1 or L2, write-back, persist, and the adoption of entries a
// restart left in a store. The same paths serve every store tier. See
// kv_cache.h for the contracts.
#include "engine/cache/kv_cache_stores.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>

#include "engine/cache/block_hash.h"
#include "engine/cache/block_meta.h"
#include "engine/cache/kv_cache.h"

namespace kvtier {

namespace {

using Clock = std::chrono::steady_clock;

// Mixed into the format tag of an int8 store, so that an exact store is
// never read as int8 or the other way round (the exact tag stays the bare
// fingerprint: stores written before formats existed remain valid).
constexpr std::uint64_t kInt8FormatTag = 0x6b762d696e743821ULL;  // "kv-int8!"

}  // namespace

void KvCache::open_stores(const std::vector<StoreTierSpec>& specs) {
  for (const StoreTierSpec& spec : specs) {
    where_[spec.tier] = spec.where;
    describe_[spec.tier] = spec.describe;
    stats_.tier[spec.tier].format = spec.format;
    // The fingerprint covers the layout version and page size too; entries
    // of another model stay unreachable through their keys, and the tag
    // makes a store written for another block size or format start empty.
    // A layer is checked apart where a read may leave layers out: a model
    // with sliding windows, read a layer at a time.
    const TransferPlan::StoreLeg& leg = plan_.store[spec.tier];
    auto store =
        spec.open({leg.block_bytes,
                   spec.format == KvFormat::kInt8 ? fingerprint_ ^ kInt8FormatTag : fingerprint_,
                   layout_.windows.empty() ? 1 : leg.parts, wake_.waker()});
    if (!store) {
      warnings_.push_back(std::string(label(spec.tier)) + " disabled: " + store.error());
      stats_.tier[spec.tier].available = false;
      stats_.tier[spec.tier].io_errors = 1;
      continue;
    }
    auto s = std::make_unique<StoreTier>();
    s->tier = spec.tier;
    s->format = spec.format;
    s->write_policy = spec.write_policy;
    s->leg = &plan_.store[spec.tier];
    s->store = std::move(*store);
    const tiers::BlockStore* opened = s->store.get();
    if (s->leg->staged()) {
      s->staging = std::make_unique<tiers::BlockPool>(
          opened->slot_bytes(), l1_->num_blocks() + (l2_ ? l2_->slots().num_blocks() : 0),
          tiers::Memory::kPageAligned);
    }
    for (const std::string& w : opened->warnings()) warnings_.push_back(w);
    stores_.push_back(std::move(s));
  }
}

KvCache::StoreTier* KvCache::store_at(Tier tier) const {
  for (const auto& s : stores_)
    if (s->tier == tier) return s.get();
  return nullptr;
}

std::vector<std::byte> KvCache::meta_of(const CacheNode& node) const {
  const tiers::BlockKey parent = node.parent == nullptr ? tiers::BlockKey{} : node.parent->key;
  return encode_block_meta(parent, fingerprint_, node.tokens());
}

bool KvCache::accepting(Tier tier) const {
  const StoreTier* s = store_at(tier);
  return s != nullptr && s->store->accepting();
}

std::size_t KvCache::store_ops_in_flight() const {
  std::size_t n = 0;
  for (const auto& s : stores_) n += s->pending.size();
  return n;
}

bool KvCache::store_pending(const LayerLoad::Read& read) const {
  const StoreTier* s = store_at(read.tier);
  return s != nullptr && s->pending.contains(read.ticket);
}

std::optional<LayerLoad::Read> KvCache::read_in_flight(const tiers::BlockKey& key) const {
  if (auto it = reads_.find(key); it != reads_.end()) return it->second;
  return std::nullopt;
}

void KvCache::protect_in_stores(const CacheNode& node) {
  for (const auto& s : stores_)
    if (node.stored(s->tier)) s->store->set_protected(node.key, node.holds > 0);
}

void KvCache::flush_stores() {
  for (const auto& s : stores_) s->store->flush();
}

std::vector<CacheNode*> KvCache::match(const tiers::BlockKey& root, std::span<const int> tokens,
                                       int max_blocks, bool* asking) {
  const int page_size = layout_.page_size;
  const int blocks = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / page_size);
  std::vector<CacheNode*> path;
  bool adopting = !stores_.empty();
  bool asked = false;
  tiers::BlockKey key = root;
  for (int i = 0; i < blocks; ++i) {
    const auto block = tokens.subspan(static_cast<std::size_t>(i) * page_size, page_size);
    const tiers::BlockKey parent_key = i == 0 ? tiers::BlockKey{} : key;
    key = chain_key(key, block);
    CacheNode* node = tree_.find(key);
    if (adopting && node != nullptr && forget_evicted(node)) {
      node = tree_.find(key);  // may be gone
      adopting = false;
    }
    if (adopting && (node == nullptr || !node->resident())) {
      // The stores are asked about the rest of the prefix at once: a store
      // whose index is elsewhere answers for all of it in one round.
      if (!asked &&
          !stores_know(key, tokens.subspan(static_cast<std::size_t>(i) * page_size), blocks - i)) {
        asking_ = true;
        if (asking != nullptr) *asking = true;
        break;
      }
      asked = true;
      node = adopt(root, path.empty() ? nullptr : path.back(), parent_key, key, block);
      adopting = node != nullptr;
    }
    if (node == nullptr || !node->resident()) break;  // a ghost stops the match
    path.push_back(node);
  }
  return path;
}

bool KvCache::stores_know(const tiers::BlockKey& first, std::span<const int> tokens, int blocks) {
  const std::size_t page_size = static_cast<std::size_t>(layout_.page_size);
  std::vector<tiers::BlockKey> keys = {first};
  for (int i = 1; i < blocks; ++i)
    keys.push_back(chain_key(keys.back(), tokens.subspan(i * page_size, page_size)));
  bool all = true;
  for (const auto& s : stores_) all = s->store->knows(keys) && all;  // every store asks now
  return all;
}

bool KvCache::forget_evicted(CacheNode* node) {
  // A store may evict on its own; the tree learns it here, ahead of
  // poll()'s take_evicted().
  bool forgot = false;
  const tiers::BlockKey key = node->key;
  for (const auto& s : stores_) {
    if (!node->stored(s->tier) || s->store->contains(key)) continue;
    tree_.set(node, s->tier, {});  // may erase the node
    forgot = true;
    if (tree_.find(key) == nullptr) break;  // erased with its last copy
  }
  return forgot;
}

CacheNode* KvCache::adopt(const tiers::BlockKey& root, CacheNode* parent,
                          const tiers::BlockKey& parent_key, const tiers::BlockKey& key,
                          std::span<const int> block) {
  // Served only when it is what the key promises: this model, these tokens,
  // after this block. From the fastest store that has it.
  const std::vector<std::byte> meta = encode_block_meta(parent_key, fingerprint_, block);
  for (const auto& s : stores_) {
    const auto record = s->store->lookup(key);
    if (!record || record->meta != meta) continue;
    CacheNode* node = tree_.insert(root, parent, block);
    tree_.set(node, s->tier, {Presence::kStored});
    return node;
  }
  return nullptr;
}

void KvCache::start_store_read(CacheNode* node) {
  // Straight into the new L1 block, or into a staging buffer that the
  // completion decodes into it.
  StoreTier* s = store_at(node->hit_tier);
  assert(s != nullptr && node->stored(s->tier));
  int staging = -1;
  std::byte* dst = l1_->data(node->slot(Tier::kL1));
  if (s->staging) {
    staging = s->staging->allocate().value();  // never empty: see StoreTier
    dst = s->staging->data(staging);
  }
  // Layers come apart only a layer at a time; read whole, the block has them all.
  if (s->leg->parts != layout_.n_layer) node->absent_layers = 0;
  const std::uint64_t ticket =
      s->store->read(node->key, meta_of(*node), dst, s->leg->parts, node->absent_layers);
  s->pending[ticket] = {node->key, false, -1, staging, Clock::now()};
  reads_[node->key] = {s->tier, ticket, s->leg->parts > 1};
}

void KvCache::poll_stores() {
  for (const auto& s : stores_) {
    for (const tiers::StoreCompletion& c : s->store->poll()) finish_store_op(*s, c);
    // Entries the store let go to make room: the tree forgets them too, or
    // their nodes would linger as ghosts that no lookup can serve (a soak
    // saw the tree grow by a node a request). After the completions: the
    // store commits a write on its own thread, and a later write() may
    // evict that entry before its completion is seen here. Taken first, the
    // eviction would find the node not yet in the store, and the completion
    // then mark it there.
    for (const tiers::BlockKey& key : s->store->take_evicted()) {
      CacheNode* node = tree_.find(key);
      if (node == nullptr || !node->stored(s->tier)) continue;
      tree_.set(node, s->tier, {});  // may erase the node
      ++stats_.tier[s->tier].dropped;
    }
  }
}

void KvCache::finish_store_op(StoreTier& s, const tiers::StoreCompletion& c) {
  auto it = s.pending.find(c.ticket);
  if (it == s.pending.end()) return;
  const StoreTier::Pending p = it->second;
  s.pending.erase(it);
  if (auto b = reads_.find(p.key);
      b != reads_.end() && b->second.tier == s.tier && b->second.ticket == c.ticket)
    reads_.erase(b);
  TierStats& stats = stats_.tier[s.tier];
  if (c.status == tiers::StoreStatus::kChecksumMismatch) ++stats.checksum_failures;
  if (c.status == tiers::StoreStatus::kIoError) ++stats.io_errors;
  CacheNode* node = tree_.find(p.key);
  // A staged read lands in staging: decoding it into the L1 block is part
  // of the promotion's time.
  std::chrono::nanoseconds latency = c.latency;
  if (!p.is_write && p.staging >= 0 && node != nullptr && c.status == tiers::StoreStatus::kOk) {
    const auto start = Clock::now();
    s.leg->decode(l1_->data(node->slot(Tier::kL1)), s.staging->data(p.staging));
    latency += Clock::now() - start;
  }
  if (p.staging >= 0) s.staging->release(p.staging);
  latency_[s.tier].record(latency);
  if (p.is_write) {
    if (p.l1_source >= 0) {
      --l1_io_refs_[p.l1_source];
      l1_->release(p.l1_source);
    }
    if (node == nullptr) return;
    if (c.status != tiers::StoreStatus::kOk) {
      tree_.set(node, s.tier, {});  // may erase the node
      return;
    }
    tree_.set(node, s.tier, {Presence::kStored});
    ++stats.demotions;
    stats.bytes_in += static_cast<long>(s.leg->block_bytes);
    if (node->holds > 0) s.store->set_protected(node->key, true);
    return;
  }
  if (node == nullptr) return;  // cannot happen: a loading node holds its L1 block
  const int block = node->slot(Tier::kL1);
  if (c.status == tiers::StoreStatus::kOk) {
    tree_.set(node, Tier::kL1, {Presence::kStored, block});
    ++stats.promotions;
    stats.bytes_out += static_cast<long>(s.leg->block_bytes - c.skipped_bytes);
    stats.bytes_skipped += static_cast<long>(c.skipped_bytes);
    return;
  }
  // A miss: the tokens will be prefilled. A corrupt entry is already gone
  // from the store; forget it here too. Still resident in L1 here, so
  // neither call can erase the node early.
  if (c.status == tiers::StoreStatus::kChecksumMismatch ||
      c.status == tiers::StoreStatus::kNotFound)
    tree_.set(node, s.tier, {});
  l1_->release(block);
  tree_.set(node, Tier::kL1, {});
}

void KvCache::start_writeback() {
  // write_back: a block goes down once it has left L1 (it is in L2), so by
  // the time L2 needs its slot it is usually clean and can be let go.
  if (!l2_) return;
  constexpr std::size_t kMaxWritesInFlight = 256;
  for (const auto& s : stores_) {
    if (s->write_policy != WritePolicy::kWriteBack) continue;
    stats_.tier[s->tier].available = s->store->accepting();
    if (!stats_.tier[s->tier].available) continue;
    while (s->pending.size() < kMaxWritesInFlight) {
      CacheNode* node = policy_->l2_unwritten(s->tier);
      if (node == nullptr || !write_to_store(node, *s)) break;
    }
    s->store->flush();
  }
}

int KvCache::write_down(StoreTier& s, const std::function<bool(const CacheNode&)>& wanted) {
  if (!s.store->accepting()) return 0;
  int written = 0;
  for (const CacheNode* n : tree_.nodes()) {
    CacheNode* node = const_cast<CacheNode*>(n);  // the tree's nodes are ours to change
    if (node->state(s.tier) != Presence::kNone || !wanted(*node)) continue;
    if (!write_to_store(node, s)) break;
    ++written;
  }
  s.store->flush();
  drain();
  return written;
}

bool KvCache::write_to_store(CacheNode* node, StoreTier& s) {
  if (device_failed_) return false;
  const bool from_l2 = node->stored(Tier::kL2);
  const std::byte* src =
      from_l2 ? l2_->slots().data(node->slot(Tier::kL2)) : l1_->data(node->slot(Tier::kL1));
  // An L2 slot in the store's format is written as it is (host memory, its
  // slot page-aligned); anything else (L1, or an exact slot for an int8
  // store) is encoded or copied into a staging buffer that lives until the
  // write completes.
  int staging = -1;
  const bool as_stored = from_l2 && config_.l2_format == s.format;
  if (s.staging && !as_stored) {
    staging = s.staging->allocate().value();  // never empty: see StoreTier
    s.leg->encode(s.staging->data(staging), src);
    src = s.staging->data(staging);
  }
  // Asked once the bytes are taken: a failure before then shows.
  if (device_failed()) {
    if (staging >= 0) s.staging->release(staging);
    return false;
  }
  const tiers::BlockRecord record{node->key, meta_of(*node)};
  tree_.set(node, s.tier, {Presence::kWriting});
  int l1_source = -1;
  if (!from_l2) {
    // The extra reference keeps the block in L1 until the write completes
    // (and, with staging, bounds the buffers in use: see StoreTier).
    l1_source = node->slot(Tier::kL1);
    l1_->add_ref(l1_source);
    ++l1_io_refs_[static_cast<std::size_t>(l1_source)];
  }
  const std::uint64_t ticket = s.store->write(record, src);
  s.pending[ticket] = {node->key, true, l1_source, staging, Clock::now()};
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
                      "): nothing more is written to the store tiers, which keep what they have");
  return true;
}

int KvCache::persist() {
  int written = 0;
  for (const auto& s : stores_) {
    if (s->write_policy == WritePolicy::kOff || !s->store->accepting()) continue;
    written +=
        write_down(*s, [](const CacheNode& n) { return n.stored(Tier::kL2) || n.whole_l1(); });
    if (auto synced = s->store->sync(); !synced)
      warnings_.push_back(std::string(label(s->tier)) + " sync: " + synced.error() +
                          "; a power loss may lose blocks written since (their checksums keep "
                          "them from being served)");
  }
  drain();
  return written;
}

}  // namespace kvtier

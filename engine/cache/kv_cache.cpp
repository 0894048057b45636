#include "engine/cache/kv_cache.h"

#include <algorithm>
#include <cassert>

#include "engine/cache/block_hash.h"
#include "engine/cache/kv_cache_stores.h"
#include "tiers/align.h"

namespace kvtier {

std::expected<std::unique_ptr<KvCache>, std::string> KvCache::create(const KvLayout& layout,
                                                                     std::uint64_t fingerprint,
                                                                     tiers::BlockPool& l1,
                                                                     const CacheConfig& config,
                                                                     const DeviceKvCodec& codec) {
  if (l1.block_bytes() < layout.block_bytes())
    return std::unexpected("L1 blocks have " + std::to_string(l1.block_bytes()) +
                           " bytes but the KV layout needs " +
                           std::to_string(layout.block_bytes()));
  const std::vector<StoreTierSpec> stores = store_tiers(config);
  for (const StoreTierSpec& spec : stores) {
    const std::string alignment = std::to_string(spec.alignment);
    if (l1.block_bytes() % spec.alignment != 0)
      return std::unexpected(std::string(label(spec.tier)) +
                             " needs L1 blocks that are a multiple of " + alignment + " bytes");
    // Host L1 blocks are the store's buffers (O_DIRECT's, for L3), which it
    // refuses unless aligned: every transfer would fail and open the breaker.
    if (l1.host_addressable() && reinterpret_cast<std::uintptr_t>(l1.data(0)) % spec.alignment != 0)
      return std::unexpected(std::string(label(spec.tier)) +
                             " reads and writes L1 blocks in place, so L1 must start on a " +
                             alignment + "-byte boundary (tiers::Memory::kPageAligned)");
  }
  if (auto ok = config.validate(); !ok) return std::unexpected(ok.error());
  TransferPlan plan = make_transfer_plan(layout, l1, config, stores, codec);
  return std::unique_ptr<KvCache>(
      new KvCache(layout, fingerprint, l1, config, std::move(plan), stores));
}

KvCache::KvCache(const KvLayout& layout, std::uint64_t fingerprint, tiers::BlockPool& l1,
                 const CacheConfig& config, TransferPlan plan,
                 const std::vector<StoreTierSpec>& stores)
    : layout_(layout),
      plan_(std::move(plan)),
      fingerprint_(fingerprint),
      l1_(&l1),
      config_(config),
      tree_(layout.page_size),
      l1_io_refs_(static_cast<std::size_t>(l1.num_blocks()), 0),
      // Enough that a step's demotions find clean blocks, few enough that
      // cleaning does not copy blocks that are about to be used again.
      clean_window_(std::max(2, l1.num_blocks() / 16)) {
  tree_.track_l1(*l1_);
  // Page-sized slots: store writes go straight from them (L3's O_DIRECT).
  open_l2(tiers::round_up(plan_.l2_block_bytes, 4096));
  stats_.tier[Tier::kL2].format = config_.l2_format;
  policy_ = std::make_unique<PlacementPolicy>(tree_, l2_ ? &l2_->slots() : nullptr);
  open_stores(stores);
}

KvCache::~KvCache() {
  persist();
  for (const CacheNode* n : tree_.nodes()) {
    if (n->state(Tier::kL1) != Presence::kNone) l1_->release(n->slot(Tier::kL1));
    if (n->state(Tier::kL2) != Presence::kNone) l2_->slots().release(n->slot(Tier::kL2));
  }
}

tiers::BlockKey KvCache::root(std::string_view cache_salt) const {
  return root_key(fingerprint_, cache_salt);
}

PrefixLookup KvCache::lookup(const tiers::BlockKey& root, std::span<const int> tokens,
                             int max_blocks) {
  PrefixLookup out;
  for (const CacheNode* n : match(root, tokens, max_blocks)) ++out.blocks[n->best_tier()];
  return out;
}

KvCache::PrefixPlan KvCache::plan_prefix(const tiers::BlockKey& root, std::span<const int> tokens,
                                         int max_blocks, bool may_split,
                                         const PrefillShape& shape) {
  PrefixPlan plan;
  std::vector<CacheNode*>& path = plan.path;
  path = match(root, tokens, max_blocks, &plan.asking);
  cut_missing_layers(plan);
  auto store_only = [](const CacheNode* n) {
    return is_store_tier(n->best_tier()) && !n->loading();
  };
  const auto first =
      static_cast<std::size_t>(std::find_if(path.begin(), path.end(), store_only) - path.begin());
  // With a store failing (its breaker open), a block only it has is a miss:
  // the request is prefilled instead of waiting for the store to come back.
  for (std::size_t i = first; i < path.size(); ++i) {
    if (store_only(path[i]) && !accepting(path[i]->best_tier())) {
      path.resize(i);
      break;
    }
  }
  if (first >= path.size()) return plan;
  // Load, recompute or both: the run from the first store-only block, its
  // first block's store standing for it (engine/cache/cost_model.h).
  const int P = layout_.page_size;
  CachedRun run;
  run.tier = path[first]->best_tier();
  run.blocks = static_cast<int>(path.size() - first);
  run.reads = static_cast<int>(
      std::count_if(path.begin() + static_cast<long>(first), path.end(), store_only));
  // The recomputed front needs every block before it in L1 for its passes.
  const bool head_ready = std::all_of(path.begin(), path.begin() + static_cast<long>(first),
                                      [](const CacheNode* n) { return n->usable_l1(); });
  if (may_split && head_ready)
    while (run.splittable < run.blocks && store_only(path[first + run.splittable]))
      ++run.splittable;
  run.suffix_tokens = static_cast<int>(tokens.size()) - static_cast<int>(path.size()) * P;
  const RunPlan chosen = costs_.plan(run, P, shape);
  plan.skipped = chosen.recompute;
  if (chosen.recompute == run.blocks)
    path.resize(first);
  else if (chosen.recompute > 0)
    plan.split = {static_cast<int>(first), chosen.recompute};
  return plan;
}

std::optional<PrefixLease> KvCache::acquire_prefix(const tiers::BlockKey& root,
                                                   std::span<const int> tokens, int max_blocks,
                                                   int l1_blocks_allowed, bool early,
                                                   const PrefillShape& shape) {
  PrefixPlan plan = plan_prefix(root, tokens, max_blocks, early, shape);
  // A store is still finding out what it has of the rest: the request waits
  // for its answers as for a read.
  if (plan.asking) return std::nullopt;
  std::vector<CacheNode*>& path = plan.path;
  tree_.touch(path);
  // While this runs, making room may wait for stores and handle completions; the
  // path's nodes must neither be demoted to make room for each other (the
  // stamp) nor vanish (a hold each).
  policy_->protect(tree_.now());
  for (CacheNode* node : path) ++node->holds;
  struct Release {
    KvCache* cache;
    std::vector<CacheNode*> path;
    ~Release() {
      cache->policy_->unprotect();
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        CacheNode* node = *it;
        // A write that completed meanwhile protected its store entry for
        // this hold (finish_store_op); with no swapped request left holding
        // the node, nothing else would ever let the entry go.
        if (--node->holds == 0) cache->protect_in_stores(*node);
        cache->tree_.prune(node);
      }
    }
  } release{this, path};

  // A read that failed meanwhile leaves its block missing: try again later
  // (the next match stops before it). Blocks on their way up only by layer
  // can be handed out now, and so can a split's: its loads land while the
  // request computes the front.
  if (start_promotions(plan, l1_blocks_allowed)) {
    flush_stores();  // start the reads now, not at the next poll()
    if (plan.split.count == 0 && (!early || !all_by_layer(path))) return std::nullopt;
  }
  const int wanted = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / layout_.page_size);
  return hand_out(plan, wanted);
}

int KvCache::first_query(const PrefixPlan& plan) const {
  const int blocks = plan.split.count > 0 ? plan.split.first : static_cast<int>(plan.path.size());
  return blocks * layout_.page_size;
}

std::uint64_t KvCache::missing_layers(const CacheNode& node, int index, int from) const {
  if (!node.in(Tier::kL1) || node.absent_layers == 0) return 0;
  return node.absent_layers & layout_.layers_reading(index, from);
}

void KvCache::cut_missing_layers(PrefixPlan& plan) {
  // Cutting moves the first query back, and an earlier block may then be
  // read by a layer its copy lacks: again until nothing is cut. What is cut
  // is recomputed: at most a window's worth of blocks, those the windowed
  // layers still read.
  for (bool again = true; again;) {
    again = false;
    const int from = first_query(plan);
    for (std::size_t i = 0; i < plan.path.size(); ++i) {
      if (plan.split.covers(static_cast<int>(i)) ||
          missing_layers(*plan.path[i], static_cast<int>(i), from) == 0)
        continue;
      plan.path.resize(i);
      drop_bare_split(plan);
      again = true;
      break;
    }
  }
}

void KvCache::drop_bare_split(PrefixPlan& plan) {
  PrefixSplit& split = plan.split;
  if (split.count == 0 || static_cast<int>(plan.path.size()) > split.first + split.count) return;
  give_back(plan.fresh);
  plan.fresh.clear();
  plan.path.resize(std::min(plan.path.size(), static_cast<std::size_t>(split.first)));
  split = {};
}

bool KvCache::start_promotions(PrefixPlan& plan, int l1_blocks_allowed) {
  std::vector<CacheNode*>& path = plan.path;
  PrefixSplit& split = plan.split;
  // First the L1 blocks, then the reads: a read leaves out the layers no
  // query of the request reads, which depends on where the path ends, and
  // it ends where L1 runs out of room.
  std::vector<int> taken(path.size(), -1);
  int count = 0;
  for (std::size_t i = 0; i < path.size(); ++i) {
    CacheNode* node = path[i];
    const bool recomputed = split.covers(static_cast<int>(i));
    if (!recomputed && (node->usable_l1() || node->loading())) continue;
    std::optional<int> block = count < l1_blocks_allowed ? alloc_l1() : std::nullopt;
    if (!block) {  // no room to bring more up: serve the part before this one
      path.resize(i);
      break;
    }
    ++count;
    if (recomputed)
      plan.fresh.push_back(*block);
    else
      taken[i] = *block;
  }
  drop_bare_split(plan);
  // Making room may have handled completions: a block whose copies all went
  // meanwhile cannot be read.
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (taken[i] >= 0 && !path[i]->in_store() && !path[i]->stored(Tier::kL2)) {
      path.resize(i);
      drop_bare_split(plan);
      break;
    }
  }
  cut_missing_layers(plan);
  const int from = first_query(plan);
  for (std::size_t i = 0; i < taken.size(); ++i) {
    if (taken[i] < 0) continue;
    if (i >= path.size()) {
      l1_->release(taken[i]);
      continue;
    }
    CacheNode* node = path[i];
    // Loading from L2 is a move out of its slot (CacheNode::moving_l2).
    node->hit_tier = node->best_tier();
    tree_.set(node, Tier::kL1, {Presence::kLoading, taken[i]});
    node->absent_layers = layout_.all_layers() & ~layout_.layers_reading(static_cast<int>(i), from);
    if (is_store_tier(node->hit_tier))
      start_store_read(node);
    else
      start_l2_read(node);
  }
  if (l2_) l2_->flush();
  // Still on its way: what this started, what another request did, and
  // what failed while making room (missing now).
  return std::any_of(path.begin(), path.end(), [](const CacheNode* n) { return !n->usable_l1(); });
}

bool KvCache::all_by_layer(const std::vector<CacheNode*>& path) const {
  return std::all_of(path.begin(), path.end(), [&](const CacheNode* node) {
    if (node->usable_l1()) return true;
    const auto read = node->loading() ? read_in_flight(node->key) : std::nullopt;
    return read && read->by_layer;
  });
}

PrefixLease KvCache::hand_out(PrefixPlan& plan, int wanted) {
  const std::vector<CacheNode*>& path = plan.path;
  const PrefixSplit& split = plan.split;
  PrefixLease lease;
  lease.cache_ = this;
  lease.blocks_.reserve(path.size());
  lease.split_ = split;
  LayerLoad& load = lease.load_;
  LayerLoad::Counted counted;
  for (std::size_t i = 0; i < path.size(); ++i) {
    CacheNode* node = path[i];
    if (split.covers(static_cast<int>(i))) {
      // The fresh block's one reference is the lease's.
      lease.blocks_.push_back(plan.fresh[i - static_cast<std::size_t>(split.first)]);
      continue;
    }
    const int block = node->slot(Tier::kL1);
    l1_->add_ref(block);
    lease.blocks_.push_back(block);
    ++counted.hits[node->hit_tier];
    // A block still landing stays its tier's until settle() says it landed
    // whole: a failed pass takes its count back and looks again.
    if (!node->loading()) {
      node->hit_tier = Tier::kL1;
      continue;
    }
    load.keys_.push_back(node->key);
    load.blocks_.push_back(block);
    load.reads_.push_back(*read_in_flight(node->key));
  }
  plan.fresh.clear();
  const long handed = static_cast<long>(path.size()) - split.count;
  counted.missed = wanted - handed;
  counted.skipped = plan.skipped;
  counted.tokens = handed * layout_.page_size;
  count(counted, +1);
  if (!load.empty()) load.counted_ = counted;
  for (int t = 0; t < kNumTiers; ++t) lease.served_.blocks[t] = static_cast<int>(counted.hits[t]);
  return lease;
}

void KvCache::give_back(std::span<const int> blocks) {
  for (int b : blocks) l1_->release(b);
}

void KvCache::insert(const tiers::BlockKey& root, std::span<const int> tokens,
                     std::span<const int> blocks) {
  insert_path(root, tokens, blocks);
}

std::vector<CacheNode*> KvCache::insert_path(const tiers::BlockKey& root,
                                             std::span<const int> tokens,
                                             std::span<const int> blocks) {
  std::vector<CacheNode*> path;
  CacheNode* parent = nullptr;
  const std::size_t P = static_cast<std::size_t>(layout_.page_size);
  for (std::size_t i = 0; i < blocks.size() && (i + 1) * P <= tokens.size(); ++i) {
    CacheNode* node = tree_.insert(root, parent, tokens.subspan(i * P, P));
    const int old = node->slot(Tier::kL1);
    // A copy without some layers gives way to this whole block once no
    // request holds it (one that does may still be settling its load).
    const bool heals =
        node->absent_layers != 0 && node->usable_l1() && old != blocks[i] && !l1_->is_shared(old);
    if (!node->in(Tier::kL1) || heals) {
      l1_->add_ref(blocks[i]);
      tree_.set(node, Tier::kL1, {Presence::kStored, blocks[i]});
      node->absent_layers = 0;
      node->hit_tier = Tier::kL1;  // computed here, whatever a failed promotion left
      if (heals) l1_->release(old);
    }
    for (const auto& s : stores_) {
      if (s->write_policy == WritePolicy::kWriteThrough &&
          node->state(s->tier) == Presence::kNone && node->whole_l1() && s->store->accepting())
        write_to_store(node, *s);
    }
    path.push_back(node);
    parent = node;
  }
  tree_.touch(path);
  // Started now: an engine with nothing more to do runs no step that would.
  flush_stores();
  return path;
}

std::optional<int> KvCache::alloc_l1() {
  if (!make_free_l1(1)) return std::nullopt;
  return l1_->allocate();
}

bool KvCache::make_free_l1(int n) {
  // More than one block to free: their copies to L2 go together.
  if (const int short_by = n - l1_->num_free(); short_by > 1)
    copy_to_l2_now(policy_->l1_next_victims(static_cast<std::size_t>(short_by)));
  while (l1_->num_free() < n) {
    CacheNode* victim = policy_->l1_victim();
    if (victim == nullptr) return false;
    demote_l1(victim);
  }
  start_writeback();
  return true;
}

int KvCache::demotable_l1() const { return policy_->demotable_l1(); }

void KvCache::demote_l1(CacheNode* node) {
  const int block = node->slot(Tier::kL1);
  if (!node->stored(Tier::kL2)) {
    // A copy without some layers goes nowhere: it is not the block.
    if (auto slot = node->absent_layers == 0
                        ? alloc_l2(PlacementPolicy::l2_victims_for_demotion(*node))
                        : std::nullopt) {
      move_block(l2_->slots().data(*slot), l1_->data(block), plan_.to_l2, Tier::kL1, Tier::kL2);
      tree_.set(node, Tier::kL2, {Presence::kStored, *slot});
      ++stats_.tier[Tier::kL2].demotions;
    } else if (!node->in_store()) {
      ++stats_.tier[Tier::kL1].dropped;
    }
  }
  l1_->release(block);
  tree_.set(node, Tier::kL1, {});  // may erase the node
}

std::optional<int> KvCache::alloc_l2(PlacementPolicy::L2Victims victims) {
  if (!l2_) return std::nullopt;
  tiers::BlockPool& slots = l2_->slots();
  if (slots.num_free() > 0) return slots.allocate();
  CacheNode* victim = policy_->l2_victim(victims);
  if (victim == nullptr && victims != PlacementPolicy::L2Victims::kAny) return std::nullopt;
  // Every candidate is still on its way to a store: waiting for the first
  // of those writes to land (a millisecond or so) is cheaper than dropping a
  // block and recomputing it; waiting for all of them (up to 256 in flight)
  // stalled the engine for tens of milliseconds.
  while (victim == nullptr && store_ops_in_flight() > 0) {
    flush_stores();
    wait(std::chrono::milliseconds(10));
    collect();
    victim = policy_->l2_clean_victim();
  }
  if (victim == nullptr) victim = policy_->l2_last_resort();
  if (victim == nullptr) return std::nullopt;
  drop_l2(victim);
  return slots.allocate();
}

void KvCache::drop_l2(CacheNode* node) {
  if (!node->in_store() && !node->in(Tier::kL1))
    ++stats_.tier[Tier::kL2].dropped;  // gone from the cache
  l2_->slots().release(node->slot(Tier::kL2));
  tree_.set(node, Tier::kL2, {});
}

void KvCache::hold(std::span<const tiers::BlockKey> keys, int delta) {
  for (const tiers::BlockKey& key : keys) {
    CacheNode* node = tree_.find(key);
    if (node == nullptr) continue;
    node->holds = std::max(0, node->holds + delta);
    protect_in_stores(*node);
    tree_.prune(node);
  }
}

int KvCache::pin(const tiers::BlockKey& root, std::span<const int> tokens, int delta) {
  const std::vector<CacheNode*> path = tree_.match(root, tokens, 1 << 30);
  int changed = 0;
  for (CacheNode* node : path) {
    const int before = node->pins;
    node->pins = std::max(0, node->pins + delta);
    changed += node->pins != before;
  }
  for (auto it = path.rbegin(); it != path.rend(); ++it) tree_.prune(*it);
  return changed;
}

int KvCache::flush(Tier tier) {
  int dropped = 0;
  // What L1 and L2 let go of goes down, never dropped while a lower tier can
  // keep it: into the fastest store first (L1 with no L2, or L2's own
  // blocks, so the blocks coming down from L1 displace only clean ones).
  // Between two flushes on an idle daemon no step runs write-back. A store
  // this daemon only reads (remote_write off) takes nothing.
  StoreTier* below = nullptr;
  for (const auto& s : stores_)
    if (below == nullptr && s->write_policy != WritePolicy::kOff) below = s.get();
  switch (tier) {
    case Tier::kL1:
      if (below != nullptr)
        write_down(*below, [has_l2 = l2_ != nullptr](const CacheNode& n) {
          return n.pins == 0 && (has_l2 ? n.stored(Tier::kL2) : n.whole_l1());
        });
      // As many copies as L2 has slots go together; the demotions of the
      // blocks they copied are then releases.
      if (l2_) copy_to_l2_now(policy_->l1_flushable(l2_->slots().num_blocks()));
      for (; CacheNode* n = policy_->flushable(Tier::kL1); ++dropped) demote_l1(n);
      break;
    case Tier::kL2:
      if (!l2_) break;
      if (below != nullptr)
        write_down(*below, [](const CacheNode& n) { return n.pins == 0 && n.stored(Tier::kL2); });
      for (; CacheNode* n = policy_->flushable(Tier::kL2); ++dropped) drop_l2(n);
      break;
    default: {  // a store tier: dropped
      StoreTier* s = store_at(tier);
      if (s == nullptr) break;
      for (; CacheNode* n = policy_->flushable(tier); ++dropped) {
        s->store->erase(n->key);
        tree_.set(n, tier, {});
        ++stats_.tier[tier].dropped;
      }
      break;
    }
  }
  return dropped;
}

}  // namespace kvtier

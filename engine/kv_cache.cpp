#include "engine/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "engine/block_hash.h"
#include "kernels/block_copy.h"
#include "kernels/kv_quant.h"
#include "tiers/align.h"
#include "tiers/l3_store.h"
#include "tiers/slab_file.h"

namespace kvtier {

namespace {

using Clock = std::chrono::steady_clock;

// Mixed into the L3 format tag of an int8 store, so that an exact store is
// never read as int8 or the other way round (the exact tag stays the bare
// fingerprint: stores written before formats existed remain valid).
constexpr std::uint64_t kInt8FormatTag = 0x6b762d696e743821ULL;  // "kv-int8!"

// Marks the device copy queue's tickets in moves_, so that they never meet
// the copy worker's (both count from 1). A move started after the queue was
// lost, and before collect() failed its moves, is the queue's too, never
// copied (kNeverCopied): a block's moves are all on one engine.
constexpr std::uint64_t kQueueTicket = 1ULL << 63;
constexpr std::uint64_t kNeverCopied = 1ULL << 62;

void encode(std::byte* dst, const std::byte* src, const kernels::KvShape& shape) {
  kernels::quantize_block(reinterpret_cast<const float*>(src), shape, dst);
}

void decode(std::byte* dst, const std::byte* src, const kernels::KvShape& shape) {
  kernels::dequantize_block(src, shape, reinterpret_cast<float*>(dst));
}

// The calling thread's host buffer of at least n bytes (float-aligned), for
// a block on its way between device memory and the int8 codec.
std::byte* host_block(std::size_t n) {
  thread_local std::vector<float> buffer;
  buffer.resize(std::max(buffer.size(), (n + sizeof(float) - 1) / sizeof(float)));
  return reinterpret_cast<std::byte*>(buffer.data());
}

}  // namespace

std::string_view to_string(WritePolicy policy) {
  return policy == WritePolicy::kWriteThrough ? "write_through" : "write_back";
}

std::expected<WritePolicy, std::string> parse_write_policy(std::string_view name) {
  if (name == "write_back") return WritePolicy::kWriteBack;
  if (name == "write_through") return WritePolicy::kWriteThrough;
  return std::unexpected("unknown write_policy '" + std::string(name) +
                         "' (expected write_back or write_through)");
}

std::string_view to_string(KvFormat format) { return format == KvFormat::kInt8 ? "int8" : "exact"; }

std::expected<KvFormat, std::string> parse_kv_format(std::string_view name) {
  if (name == "exact") return KvFormat::kExact;
  if (name == "int8") return KvFormat::kInt8;
  return std::unexpected("unknown KV format '" + std::string(name) + "' (expected exact or int8)");
}

std::expected<void, std::string> CacheConfig::validate() const {
  if (l2_format == KvFormat::kInt8 && l3_format == KvFormat::kExact && !l3_path.empty())
    return std::unexpected(
        "l2_format int8 over l3_format exact would store lossy blocks on L3 at 4x their int8 "
        "size; use l3_format int8 with an int8 L2 (or l2_format exact)");
  return {};
}

// What an L3 operation in flight is for, by ticket.
struct KvCache::L3Parts {
  // With an int8 L3 or L1 in device memory: page-aligned buffers (O_DIRECT)
  // for the bytes of writes from L1 or an exact L2 (encoded, or copied off
  // the device), and for reads until poll() decodes or copies them into
  // their L1 block. Never runs out: each buffer in use goes with an L1
  // block (a read into it, or a write from it holding a reference) or an L2
  // slot (its node is writing, so the slot stays), and there is one buffer
  // per L1 block and L2 slot. Declared before the store, so it outlives the
  // store's final drain.
  std::unique_ptr<tiers::BlockPool> staging;
  std::unique_ptr<tiers::L3Store> store;
  struct Pending {
    tiers::BlockKey key;
    bool is_write = false;
    int l1_source = -1;  // write from L1: the block whose extra reference we hold
    int staging = -1;    // the staging buffer the bytes pass through, or -1
    Clock::time_point start;
  };
  std::unordered_map<std::uint64_t, Pending> pending;
  // Reads go in this many pieces: a layer each (CacheConfig::load_by_layer)
  // or 1. Those in pieces still in flight, by block: a request that finds
  // one of its blocks loading can take the read over as its LayerLoad.
  int parts = 1;
  std::unordered_map<tiers::BlockKey, std::uint64_t, tiers::BlockKeyHash> reads_by_layer;
};

// Set by the copy worker's and the L3 store's completion threads; wait()
// sleeps on it. Reset only by wait(), so a completion that came before wait()
// was called is not missed.
struct KvCache::Wake {
  std::mutex mu;
  std::condition_variable cv;
  bool signalled = false;
  void signal() {
    {
      std::lock_guard lock(mu);
      signalled = true;
    }
    cv.notify_one();
  }
};

std::expected<std::unique_ptr<KvCache>, std::string> KvCache::create(const KvLayout& layout,
                                                                     std::uint64_t fingerprint,
                                                                     tiers::BlockPool& l1,
                                                                     const CacheConfig& config,
                                                                     const DeviceKvCodec& codec) {
  if (l1.block_bytes() < layout.block_bytes())
    return std::unexpected("L1 blocks have " + std::to_string(l1.block_bytes()) +
                           " bytes but the KV layout needs " +
                           std::to_string(layout.block_bytes()));
  if (!config.l3_path.empty() && l1.block_bytes() % 4096 != 0)
    return std::unexpected("L3 needs L1 blocks that are a multiple of 4096 bytes");
  // Host L1 blocks are L3's O_DIRECT buffers, which the kernel refuses
  // unless page-aligned: every transfer would fail and open the breaker.
  if (!config.l3_path.empty() && l1.host_addressable() &&
      reinterpret_cast<std::uintptr_t>(l1.data(0)) % 4096 != 0)
    return std::unexpected(
        "L3 reads and writes L1 blocks in place, so L1 must start on a 4096-byte boundary "
        "(tiers::Memory::kPageAligned)");
  if (auto ok = config.validate(); !ok) return std::unexpected(ok.error());
  return std::unique_ptr<KvCache>(new KvCache(layout, fingerprint, l1, config, codec));
}

KvCache::KvCache(const KvLayout& layout, std::uint64_t fingerprint, tiers::BlockPool& l1,
                 const CacheConfig& config, const DeviceKvCodec& codec)
    : layout_(layout),
      shape_(layout.shape()),
      block_bytes_(layout.block_bytes()),
      l2_block_bytes_(config.l2_format == KvFormat::kInt8 ? kernels::kv_quant_bytes(shape_)
                                                          : block_bytes_),
      l3_block_bytes_(config.l3_format == KvFormat::kInt8 ? kernels::kv_quant_bytes(shape_)
                                                          : block_bytes_),
      fingerprint_(fingerprint),
      l1_(&l1),
      config_(config),
      tree_(layout.page_size),
      l1_io_refs_(static_cast<std::size_t>(l1.num_blocks()), 0),
      wake_(std::make_shared<Wake>()),
      // Enough that a step's demotions find clean blocks, few enough that
      // cleaning does not copy blocks that are about to be used again.
      clean_window_(std::max(2, l1.num_blocks() / 16)) {
  // A copy of n bytes between L1 and host memory: copy_block in host memory,
  // the pool's own copy (a CUDA copy) when L1 is device memory.
  auto exact = [l1 = &l1](std::size_t n) -> tiers::CopyWorker::Transfer {
    if (l1->host_addressable())
      return [n](std::byte* dst, const std::byte* src) { kernels::copy_block(dst, src, n); };
    return [l1, n](std::byte* dst, const std::byte* src) { l1->copy(dst, src, n); };
  };
  // The int8 codec, for whichever tier stores int8: on the host, or on the
  // device that holds L1 when it offers one. Without one, an L1 block in
  // device memory passes through a host buffer of the calling thread's (the
  // copy worker's, or the engine's when it helps).
  tiers::CopyWorker::Transfer int8_encode, int8_decode;
  if (l1.host_addressable()) {
    int8_encode = [shape = shape_](std::byte* dst, const std::byte* src) {
      encode(dst, src, shape);
    };
    int8_decode = [shape = shape_](std::byte* dst, const std::byte* src) {
      decode(dst, src, shape);
    };
  } else if (codec.encode && codec.decode) {
    // Decodes land in L1; an encode may also start from an exact L2 slot on
    // its way to an int8 L3, which is host memory: the host encodes that.
    int8_encode = [shape = shape_, l1 = &l1, device = codec.encode](std::byte* dst,
                                                                    const std::byte* src) {
      if (l1->contains(src))
        device(dst, src);
      else
        encode(dst, src, shape);
    };
    int8_decode = codec.decode;
  } else {
    int8_encode = [shape = shape_, l1 = &l1, n = block_bytes_](std::byte* dst,
                                                               const std::byte* src) {
      std::byte* host = host_block(n);
      l1->copy(host, src, n);
      encode(dst, host, shape);
    };
    int8_decode = [shape = shape_, l1 = &l1, n = block_bytes_](std::byte* dst,
                                                               const std::byte* src) {
      std::byte* host = host_block(n);
      decode(host, src, shape);
      l1->copy(dst, host, n);
    };
  }
  if (config.l2_format == KvFormat::kInt8) {
    to_l2_ = int8_encode;
    from_l2_ = int8_decode;
  } else {
    to_l2_ = from_l2_ = exact(block_bytes_);
    // Promotions a layer at a time, when a copy engine moves them (L1 in
    // device memory) and layers tile the block (copy_block wants whole cache
    // lines). Between two host pools a copy is a core's work: moved by
    // layer, beside the forward it was meant to overlap, it takes a core
    // from that forward instead (tier_bench: an L2 hit's TTFT 45 ms by
    // layer, 36 ms whole, 32 ms from L1).
    if (config.load_by_layer && !l1.host_addressable() && layers_tile_block(64)) {
      l2_layers_ = layout_.n_layer;
      layer_copy_ = exact(layout_.layer_bytes());
    }
  }
  // Into and out of L3's staging buffers: the int8 codec, or plain copies
  // when L1 is device memory (O_DIRECT cannot reach it).
  if (config.l3_format == KvFormat::kInt8) {
    l3_encode_ = int8_encode;
    l3_decode_ = int8_decode;
  } else if (!l1.host_addressable()) {
    l3_encode_ = l3_decode_ = exact(block_bytes_);
  }
  // Page-sized slots: L3 writes go straight from them (O_DIRECT).
  const std::size_t slot = tiers::round_up(l2_block_bytes_, 4096);
  const int l2_blocks = static_cast<int>(config.l2_bytes / slot);
  if (l2_blocks > 0) {
    // Under an L1 in device memory, L2 lies in host memory the device copies
    // at bus speed, and exact blocks move on the device's copy queue.
    const tiers::DeviceLink* link = l1.link();
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
    // The queue makes plain copies: int8 moves run the host codec on the
    // worker (through a host buffer, see host_block).
    const bool l2_on_link = l2_->memory() == tiers::Memory::kExternal;
    if (l2_on_link && config.l2_format == KvFormat::kExact && link->copy_queue) {
      auto queue = link->copy_queue([wake = wake_] { wake->signal(); });
      if (queue)
        queue_ = std::move(*queue);
      else
        warnings_.push_back("the device's copy queue: " + queue.error() +
                            "; L1<->L2 copies run on a thread");
    }
  } else if (config.l2_bytes > 0) {
    warnings_.push_back("l2_bytes " + std::to_string(config.l2_bytes) + " holds no block of " +
                        std::to_string(slot) + " bytes; no L2");
  }
  if (!config.l3_path.empty()) {
    tiers::L3Options options;
    options.path = config.l3_path;
    options.capacity_bytes = config.l3_bytes;
    options.block_bytes = l3_block_bytes_;
    // The fingerprint covers the layout version and page size too; entries
    // of another model stay unreachable through their keys, and the tag
    // makes a store written for another block size or format start empty.
    options.format_tag =
        config.l3_format == KvFormat::kInt8 ? fingerprint ^ kInt8FormatTag : fingerprint;
    options.backoff_initial = config.l3_backoff;
    options.on_completion = [wake = wake_] { wake->signal(); };
    auto store = tiers::L3Store::open(options);
    if (store) {
      l3_ = std::make_unique<L3Parts>();
      l3_->store = std::move(*store);
      if (l3_encode_) {
        l3_->staging = std::make_unique<tiers::BlockPool>(
            l3_->store->slot_bytes(), l1.num_blocks() + (l2_ ? l2_->num_blocks() : 0),
            tiers::Memory::kPageAligned);
      }
      // A layer of the block is a piece when it is a whole number of pages
      // (O_DIRECT) and the block has no padding; int8 blocks land in staging
      // and are decoded whole, so they are read whole.
      if (config.load_by_layer && !l3_->staging && layout_.n_layer <= tiers::L3Store::kMaxParts &&
          layers_tile_block(tiers::SlabFile::kAlignment))
        l3_->parts = layout_.n_layer;
      for (const std::string& w : l3_->store->warnings()) warnings_.push_back(w);
    } else {
      warnings_.push_back("L3 disabled: " + store.error());
      stats_.tier[2].available = false;
      stats_.tier[2].io_errors = 1;
    }
  }
}

KvCache::~KvCache() {
  persist();
  for (const CacheNode* n : tree_.nodes()) {
    if (n->l1 >= 0) l1_->release(n->l1);
    if (n->l2 >= 0) l2_->release(n->l2);
  }
}

tiers::BlockKey KvCache::root(std::string_view cache_salt) const {
  return root_key(fingerprint_, cache_salt);
}

// Brings L3 entries under a path into the tree: after a restart the tree is
// empty but the store still knows every block by its key.
static void adopt_l3_entries(RadixCache& tree, tiers::L3Store* store, const tiers::BlockKey& root,
                             std::span<const int> tokens, int max_blocks, int page_size,
                             std::uint64_t fingerprint) {
  if (store == nullptr) return;
  const int blocks = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / page_size);
  CacheNode* parent = nullptr;
  tiers::BlockKey key = root;
  for (int i = 0; i < blocks; ++i) {
    const auto block = tokens.subspan(static_cast<std::size_t>(i) * page_size, page_size);
    key = chain_key(key, block);
    CacheNode* node = tree.find(key);
    if (node == nullptr || !node->resident()) {
      const auto record = store->lookup(key);
      if (!record || record->fingerprint != fingerprint ||
          !std::equal(block.begin(), block.end(), record->tokens.begin(), record->tokens.end()))
        return;
      node = tree.insert(root, parent, block);
      tree.set_l3(node, true);
    } else if (node->l3 && !store->contains(key)) {
      // The store evicted it on its own; the tree learns it here.
      tree.set_l3(node, false);
      return;
    }
    parent = node;
  }
}

PrefixLookup KvCache::lookup(const tiers::BlockKey& root, std::span<const int> tokens,
                             int max_blocks) {
  adopt_l3_entries(tree_, l3_ ? l3_->store.get() : nullptr, root, tokens, max_blocks,
                   layout_.page_size, fingerprint_);
  PrefixLookup out;
  for (const CacheNode* n : tree_.match(root, tokens, max_blocks))
    ++out.blocks[static_cast<int>(n->best_tier())];
  return out;
}

std::optional<std::vector<int>> KvCache::acquire_prefix(const tiers::BlockKey& root,
                                                        std::span<const int> tokens, int max_blocks,
                                                        int l1_blocks_allowed, LayerLoad* load,
                                                        PrefixLookup* served) {
  // Counted when blocks are handed out: a request waiting for its blocks to
  // come up looks again every step.
  adopt_l3_entries(tree_, l3_ ? l3_->store.get() : nullptr, root, tokens, max_blocks,
                   layout_.page_size, fingerprint_);
  std::vector<CacheNode*> path = tree_.match(root, tokens, max_blocks);
  // With L3 failing (its breaker open), a block only L3 has is a miss: the
  // request is prefilled instead of waiting for the disk to come back.
  const bool l3_usable = l3_ && l3_->store->accepting();
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i]->best_tier() == Tier::kL3 && !path[i]->l1_loading && !l3_usable) {
      path.resize(i);
      break;
    }
  }

  // Load or recompute: a tail of L3-only blocks is loaded only when reading it
  // is cheaper than prefilling its tokens (a short run may not be: reads have
  // a fixed latency, prefill is per token).
  long skipped = 0;
  std::size_t first_l3 = path.size();
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i]->best_tier() == Tier::kL3 && !path[i]->l1_loading) {
      first_l3 = i;
      break;
    }
  }
  const TierCosts& costs = costs_.costs();
  if (first_l3 < path.size() && costs.prefill_per_token_s > 0) {
    const double n = static_cast<double>(path.size() - first_l3);
    const double load = costs.l3_latency_s + n * costs.l3_per_block_s;
    const double recompute = n * layout_.page_size * costs.prefill_per_token_s;
    if (load >= recompute) {
      skipped = static_cast<long>(n);
      path.resize(first_l3);
    }
  }
  tree_.touch(path);
  // While this runs, making room may wait for L3 and handle completions; the
  // path's nodes must neither be demoted to make room for each other (the
  // stamp) nor vanish (a hold each).
  protected_stamp_ = tree_.now();
  for (CacheNode* node : path) ++node->holds;
  struct Release {
    KvCache* cache;
    std::vector<CacheNode*>* path;
    ~Release() {
      cache->protected_stamp_.reset();
      for (auto it = path->rbegin(); it != path->rend(); ++it) {
        CacheNode* node = *it;
        // A write that completed meanwhile protected its L3 entry for this
        // hold (poll_l3); with no swapped request left holding the node,
        // nothing else would ever let the entry go.
        if (--node->holds == 0 && node->l3) cache->l3_->store->set_protected(node->key, false);
        cache->tree_.prune(node);
      }
    }
  };
  std::vector<CacheNode*> held = path;
  Release release{this, &held};

  bool pending = false;
  int taken = 0;
  std::vector<CacheNode*> up_by_layer;  // L2 promotions to copy a layer at a time
  for (std::size_t i = 0; i < path.size(); ++i) {
    CacheNode* node = path[i];
    if (node->usable_l1()) continue;
    if (node->l1_loading) {
      pending = true;
      continue;
    }
    std::optional<int> block = taken < l1_blocks_allowed ? alloc_l1() : std::nullopt;
    if (!block) {  // no room to bring more up: serve the part before this one
      path.resize(i);
      break;
    }
    ++taken;
    node->l1_loading = true;
    node->hit_tier = node->l2 >= 0 ? Tier::kL2 : Tier::kL3;
    tree_.set_l1(node, *block);
    pending = true;
    if (node->l2 >= 0) {
      node->l2_copying = true;
      if (l2_layers_ > 1) {
        up_by_layer.push_back(node);
        continue;
      }
      const std::uint64_t ticket =
          start_move(l1_->data(*block), l2_->data(node->l2), block_bytes_, from_l2_);
      moves_[ticket] = {node->key, /*up=*/true, *block, node->l2};
      continue;
    }
    // L3 only: read straight into the new L1 block, or into a staging buffer
    // that poll_l3() decodes into it.
    assert(node->l3 && l3_);
    int staging = -1;
    std::byte* dst = l1_->data(*block);
    if (l3_->staging) {
      staging = l3_->staging->allocate().value();  // never empty: see L3Parts
      dst = l3_->staging->data(staging);
    }
    const std::uint64_t ticket = l3_->store->read(node->key, fingerprint_, dst, l3_->parts);
    l3_->pending[ticket] = {node->key, false, -1, staging, Clock::now()};
    if (l3_->parts > 1) l3_->reads_by_layer[node->key] = ticket;
  }
  // Layer l of every block before layer l + 1 of any: the first layers are
  // the first needed.
  for (int l = 0; l < l2_layers_ && !up_by_layer.empty(); ++l) {
    for (CacheNode* node : up_by_layer) {
      const std::size_t offset = static_cast<std::size_t>(l) * layout_.layer_bytes();
      const std::uint64_t ticket =
          start_move(l1_->data(node->l1) + offset, l2_->data(node->l2) + offset,
                     layout_.layer_bytes(), layer_copy_);
      moves_[ticket] = {node->key, /*up=*/true, node->l1, node->l2, /*by_layer=*/true};
      LayeredMove& m = copies_by_layer_[node->key];
      m.tickets.push_back(ticket);
      m.left = l2_layers_;
    }
  }
  // A read that failed meanwhile leaves its block missing: try again later
  // (the next match stops before it). Blocks on their way up only by layer
  // can be handed out now.
  bool layerwise = load != nullptr;
  for (const CacheNode* node : path) {
    if (node->usable_l1()) continue;
    pending = true;
    layerwise =
        layerwise && node->l1_loading &&
        ((l3_ && l3_->reads_by_layer.contains(node->key)) || copies_by_layer_.contains(node->key));
  }
  if (pending) {
    if (l3_) l3_->store->flush();  // start the reads now, not at the next poll()
    if (!layerwise) return std::nullopt;
  }

  std::vector<int> blocks;
  blocks.reserve(path.size());
  LayerLoad::Counted counted;
  for (CacheNode* node : path) {
    l1_->add_ref(node->l1);
    blocks.push_back(node->l1);
    ++counted.hits[static_cast<int>(node->hit_tier)];
    // A block still landing stays its tier's until settle() says it landed
    // whole: a failed pass takes its count back and looks again.
    if (!node->l1_loading) {
      node->hit_tier = Tier::kL1;
      continue;
    }
    load->keys.push_back(node->key);
    load->blocks.push_back(node->l1);
    if (auto m = copies_by_layer_.find(node->key); m != copies_by_layer_.end())
      load->copies.push_back(m->second.tickets);
    else
      load->reads.push_back(l3_->reads_by_layer.at(node->key));
  }
  const int wanted = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / layout_.page_size);
  counted.missed = wanted - static_cast<long>(blocks.size());
  counted.skipped = skipped;
  counted.tokens = static_cast<long>(blocks.size()) * layout_.page_size;
  count(counted, +1);
  if (load != nullptr && !load->empty()) load->counted = counted;
  if (served != nullptr)
    for (int t = 0; t < kNumTiers; ++t) served->blocks[t] = static_cast<int>(counted.hits[t]);
  return blocks;
}

std::vector<CacheNode*> KvCache::insert(const tiers::BlockKey& root, std::span<const int> tokens,
                                        std::span<const int> blocks) {
  std::vector<CacheNode*> path;
  CacheNode* parent = nullptr;
  const std::size_t P = static_cast<std::size_t>(layout_.page_size);
  for (std::size_t i = 0; i < blocks.size() && (i + 1) * P <= tokens.size(); ++i) {
    CacheNode* node = tree_.insert(root, parent, tokens.subspan(i * P, P));
    if (node->l1 < 0) {
      l1_->add_ref(blocks[i]);
      tree_.set_l1(node, blocks[i]);
      node->hit_tier = Tier::kL1;  // computed here, whatever a failed promotion left
    }
    if (l3_ && config_.write_policy == WritePolicy::kWriteThrough && !node->l3 &&
        !node->l3_writing && node->usable_l1() && l3_->store->accepting()) {
      write_to_l3(node);
    }
    path.push_back(node);
    parent = node;
  }
  tree_.touch(path);
  return path;
}

std::optional<int> KvCache::alloc_l1() {
  if (!make_free_l1(1)) return std::nullopt;
  return l1_->allocate();
}

bool KvCache::can_demote(const CacheNode& n) const {
  if (n.l1_loading || l1_->ref_count(n.l1) != 1) return false;  // a request or a write holds it
  if (protected_stamp_ && n.last_use == *protected_stamp_) return false;
  if (n.pins == 0 || n.l2 >= 0) return true;
  // A pinned block may leave L1 only for L2.
  return l2_ && (l2_->num_free() > 0 || tree_.lru(Tier::kL2, [](const CacheNode& m) {
           return m.pins == 0 && !m.l3_writing && !m.l2_copying;
         }) != nullptr);
}

bool KvCache::make_free_l1(int n) {
  while (l1_->num_free() < n) {
    CacheNode* victim = tree_.lru(Tier::kL1, [this](const CacheNode& m) { return can_demote(m); });
    if (victim == nullptr) return false;
    demote_l1(victim);
  }
  start_writeback();
  return true;
}

int KvCache::demotable_l1() const {
  int n = 0;
  for (const CacheNode* node : tree_.nodes())
    if (node->l1 >= 0 && !node->l1_loading && l1_->ref_count(node->l1) == 1) ++n;
  return n;
}

void KvCache::demote_l1(CacheNode* node) {
  const int block = node->l1;
  if (node->l2 < 0) {
    // A block L3 already has may take a free or clean slot, never push out a
    // block that exists only in L2.
    if (auto slot = alloc_l2(node->l3 ? L2Victims::kWithCopy : L2Victims::kAny)) {
      move_block(l2_->data(*slot), l1_->data(block), to_l2_, Tier::kL1, Tier::kL2);
      tree_.set_l2(node, *slot);
      ++stats_.tier[1].demotions;
    } else if (!node->l3) {
      ++stats_.tier[0].dropped;
    }
  }
  l1_->release(block);
  tree_.set_l1(node, -1);  // may erase the node
}

std::optional<int> KvCache::alloc_l2(L2Victims victims) {
  if (!l2_) return std::nullopt;
  if (l2_->num_free() == 0) {
    // Cheapest loss first: a block L3 (or L1) also has, then one no swapped
    // request waits for, then any unpinned one.
    auto movable = [](const CacheNode& m) { return m.pins == 0 && !m.l3_writing && !m.l2_copying; };
    CacheNode* victim =
        victims == L2Victims::kOnL3
            ? tree_.lru(Tier::kL2,
                        [&](const CacheNode& m) { return movable(m) && m.l3 && m.l1 < 0; })
            : tree_.lru(Tier::kL2,
                        [&](const CacheNode& m) { return movable(m) && (m.l3 || m.l1 >= 0); });
    if (victim == nullptr && victims != L2Victims::kAny) return std::nullopt;
    // Every candidate is still on its way to L3: waiting for the first of
    // those writes to land (a millisecond or so) is cheaper than dropping a
    // block and recomputing it; waiting for all of them (up to 256 in
    // flight) stalled the engine for tens of milliseconds.
    while (victim == nullptr && l3_ && !l3_->pending.empty()) {
      l3_->store->flush();
      wait(std::chrono::milliseconds(10));
      collect();
      victim = tree_.lru(Tier::kL2, [&](const CacheNode& m) { return movable(m) && m.l3; });
    }
    if (victim == nullptr)
      victim = tree_.lru(Tier::kL2, [&](const CacheNode& m) { return movable(m) && m.holds == 0; });
    if (victim == nullptr) victim = tree_.lru(Tier::kL2, movable);
    if (victim == nullptr) return std::nullopt;
    if (!victim->l3 && victim->l1 < 0) ++stats_.tier[1].dropped;
    l2_->release(victim->l2);
    tree_.set_l2(victim, -1);
  }
  return l2_->allocate();
}

void KvCache::move_block(std::byte* dst, const std::byte* src,
                         const tiers::CopyWorker::Transfer& how, Tier from, Tier to) {
  const auto start = Clock::now();
  how(dst, src);
  account_copy(from, to, Clock::now() - start);
}

std::uint64_t KvCache::start_move(std::byte* dst, const std::byte* src, std::size_t bytes,
                                  const tiers::CopyWorker::Transfer& how) {
  if (queue_) {
    auto ticket = queue_->copy(dst, src, bytes);
    if (ticket) return *ticket | kQueueTicket;
    lose_queue(ticket.error());
  }
  if (queue_lost_) return kQueueTicket | kNeverCopied | ++never_copied_;
  if (!copier_) copier_ = std::make_unique<tiers::CopyWorker>([wake = wake_] { wake->signal(); });
  return copier_->copy(dst, src, how);
}

std::vector<tiers::CopyCompletion> KvCache::poll_moves() {
  std::vector<tiers::CopyCompletion> done;
  if (copier_) done = copier_->poll();
  if (queue_) {
    auto polled = queue_->poll();
    if (!polled) {
      lose_queue(polled.error());
      return done;
    }
    for (const tiers::CopyCompletion& c : *polled)
      done.push_back({c.ticket | kQueueTicket, c.latency});
  }
  return done;
}

void KvCache::lose_queue(const std::string& why) {
  warnings_.push_back("the device's copy queue failed (" + why +
                      "): its copies in flight are thrown away, and L1<->L2 copies run on a "
                      "thread from now on");
  ++stats_.tier[1].io_errors;
  queue_.reset();  // waits for whatever can still end
  queue_lost_ = true;
}

void KvCache::fail_queue_moves() {
  queue_lost_ = false;
  for (auto it = moves_.begin(); it != moves_.end();) {
    if ((it->first & kQueueTicket) == 0) {
      ++it;
      continue;
    }
    const Move move = it->second;
    it = moves_.erase(it);
    // A block moved by layer fails once, at the first of its layers met.
    if (move.by_layer && copies_by_layer_.erase(move.key) == 0) continue;
    CacheNode* node = tree_.find(move.key);
    assert(node != nullptr && node->l1 == move.l1_block);
    node->l2_copying = false;
    if (move.up) {
      // What reached the L1 block is unknown: it leaves the cache (a request
      // that holds it by layer has its pass thrown away by settle()); the
      // L2 copy stays.
      node->l1_loading = false;
      tree_.set_l1(node, -1);
      l1_->release(move.l1_block);
    } else {
      // Cleaning: the L2 slot's bytes are unknown; the L1 block stays.
      l2_->release(move.l2_slot);
      --l1_io_refs_[static_cast<std::size_t>(move.l1_block)];
      l1_->release(move.l1_block);
    }
  }
}

std::size_t KvCache::stored_bytes(Tier tier) const {
  switch (tier) {
    case Tier::kL1:
      return block_bytes_;
    case Tier::kL2:
      return l2_block_bytes_;
    case Tier::kL3:
      return l3_block_bytes_;
  }
  return block_bytes_;
}

void KvCache::account_copy(Tier from, Tier to, std::chrono::nanoseconds took) {
  stats_.tier[static_cast<int>(from)].bytes_out += static_cast<long>(stored_bytes(from));
  stats_.tier[static_cast<int>(to)].bytes_in += static_cast<long>(stored_bytes(to));
  // Filed under the lower tier: an L1<->L2 move is L2's transfer.
  latency_[std::max(static_cast<int>(from), static_cast<int>(to))].record(took);
}

void KvCache::start_cleaning() {
  if (!l2_ || l1_->num_free() >= clean_window_) return;
  // The next demotion candidates, in the order make_free_l1 takes them.
  const std::vector<CacheNode*> next = tree_.lru_n(
      Tier::kL1, static_cast<std::size_t>(clean_window_),
      [this](const CacheNode& m) { return !m.l1_loading && l1_->ref_count(m.l1) == 1; });
  for (CacheNode* node : next) {
    if (node->l2 >= 0 || node->l2_copying) continue;
    const auto slot = alloc_l2(L2Victims::kOnL3);
    if (!slot) return;
    // The extra reference keeps the block (and so the node) in L1 until the
    // copy is done; can_demote() passes it over meanwhile.
    l1_->add_ref(node->l1);
    ++l1_io_refs_[static_cast<std::size_t>(node->l1)];
    node->l2_copying = true;
    const std::uint64_t ticket =
        start_move(l2_->data(*slot), l1_->data(node->l1), block_bytes_, to_l2_);
    moves_[ticket] = {node->key, /*up=*/false, node->l1, *slot};
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
  assert(node != nullptr && node->l1 == move.l1_block);
  node->l2_copying = false;
  if (move.up) {
    account_copy(Tier::kL2, Tier::kL1, latency);
    node->l1_loading = false;
    ++stats_.tier[1].promotions;
    return;
  }
  account_copy(Tier::kL1, Tier::kL2, latency);
  tree_.set_l2(node, move.l2_slot);
  ++stats_.tier[1].demotions;
  ++stats_.cleaned;
  --l1_io_refs_[static_cast<std::size_t>(move.l1_block)];
  l1_->release(move.l1_block);
}

std::optional<int> KvCache::stash_partial(int l1_block) {
  auto slot = alloc_l2(L2Victims::kAny);
  if (!slot) return std::nullopt;
  move_block(l2_->data(*slot), l1_->data(l1_block), to_l2_, Tier::kL1, Tier::kL2);
  ++stats_.tier[1].demotions;
  return slot;
}

std::optional<int> KvCache::unstash_partial(int l2_slot, bool keep_slot) {
  auto block = alloc_l1();
  if (!block) return std::nullopt;
  move_block(l1_->data(*block), l2_->data(l2_slot), from_l2_, Tier::kL2, Tier::kL1);
  ++stats_.tier[1].promotions;
  if (!keep_slot) l2_->release(l2_slot);
  return block;
}

void KvCache::drop_stash(int l2_slot) { l2_->release(l2_slot); }

void KvCache::hold(std::span<const tiers::BlockKey> keys, int delta) {
  for (const tiers::BlockKey& key : keys) {
    CacheNode* node = tree_.find(key);
    if (node == nullptr) continue;
    node->holds = std::max(0, node->holds + delta);
    if (l3_ && node->l3) l3_->store->set_protected(key, node->holds > 0);
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

int KvCache::write_down_to_l3(const std::function<bool(const CacheNode&)>& wanted) {
  if (!l3_ || !l3_->store->accepting()) return 0;
  int written = 0;
  for (const CacheNode* n : tree_.nodes()) {
    CacheNode* node = const_cast<CacheNode*>(n);  // the tree's nodes are ours to change
    if (node->l3 || node->l3_writing || !wanted(*node)) continue;
    if (!write_to_l3(node)) break;
    ++written;
  }
  l3_->store->flush();
  drain();
  return written;
}

int KvCache::flush(Tier tier) {
  int dropped = 0;
  switch (tier) {
    case Tier::kL1:
      // What L1 lets go of goes down, never dropped while a lower tier can
      // keep it: with no L2, to L3 first; with one, L2's own blocks go to L3
      // first, so the blocks coming down displace only clean ones. (Between
      // two flushes on an idle daemon no step runs write-back.)
      write_down_to_l3([has_l2 = l2_ != nullptr](const CacheNode& n) {
        return n.pins == 0 && (has_l2 ? n.l2 >= 0 : n.usable_l1());
      });
      while (CacheNode* n = tree_.lru(Tier::kL1, [this](const CacheNode& m) {
        return !m.l1_loading && l1_->ref_count(m.l1) == 1 && m.pins == 0;
      })) {
        demote_l1(n);
        ++dropped;
      }
      break;
    case Tier::kL2:
      if (!l2_) break;
      write_down_to_l3([](const CacheNode& n) { return n.pins == 0 && n.l2 >= 0; });
      while (CacheNode* n = tree_.lru(Tier::kL2, [](const CacheNode& m) {
        return m.pins == 0 && m.holds == 0 && !m.l3_writing && !m.l2_copying;
      })) {
        if (!n->l3 && n->l1 < 0) ++stats_.tier[1].dropped;  // gone from the cache
        l2_->release(n->l2);
        tree_.set_l2(n, -1);
        ++dropped;
      }
      break;
    case Tier::kL3:
      if (!l3_) break;
      while (CacheNode* n = tree_.lru(
                 Tier::kL3, [](const CacheNode& m) { return m.holds == 0 && !m.l1_loading; })) {
        l3_->store->erase(n->key);
        tree_.set_l3(n, false);
        ++stats_.tier[2].dropped;
        ++dropped;
      }
      break;
  }
  return dropped;
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
  for (const tiers::CopyCompletion& c : poll_moves()) finish_move(c.ticket, c.latency);
  if (queue_lost_) fail_queue_moves();
  if (l3_) poll_l3();
}

void KvCache::poll_l3() {
  for (const tiers::L3Completion& c : l3_->store->poll()) {
    auto it = l3_->pending.find(c.ticket);
    if (it == l3_->pending.end()) continue;
    const L3Parts::Pending p = it->second;
    l3_->pending.erase(it);
    if (auto b = l3_->reads_by_layer.find(p.key);
        b != l3_->reads_by_layer.end() && b->second == c.ticket)
      l3_->reads_by_layer.erase(b);
    TierStats& t3 = stats_.tier[2];
    if (c.status == tiers::L3Status::kChecksumMismatch) ++t3.checksum_failures;
    if (c.status == tiers::L3Status::kIoError) ++t3.io_errors;
    CacheNode* node = tree_.find(p.key);
    // An int8 read lands in staging: decoding it into the L1 block is part
    // of the promotion's time.
    std::chrono::nanoseconds latency = c.latency;
    if (!p.is_write && p.staging >= 0 && node != nullptr && c.status == tiers::L3Status::kOk) {
      const auto start = Clock::now();
      l3_decode_(l1_->data(node->l1), l3_->staging->data(p.staging));
      latency += Clock::now() - start;
    }
    if (p.staging >= 0) l3_->staging->release(p.staging);
    latency_[2].record(latency);
    if (p.is_write) {
      if (p.l1_source >= 0) {
        --l1_io_refs_[p.l1_source];
        l1_->release(p.l1_source);
      }
      if (node == nullptr) continue;
      node->l3_writing = false;
      if (c.status == tiers::L3Status::kOk) {
        tree_.set_l3(node, true);
        ++t3.demotions;
        t3.bytes_in += static_cast<long>(l3_block_bytes_);
        if (node->holds > 0) l3_->store->set_protected(node->key, true);
      } else {
        tree_.prune(node);
      }
      continue;
    }
    if (node == nullptr) continue;  // cannot happen: a loading node holds its L1 block
    if (c.status == tiers::L3Status::kOk) {
      node->l1_loading = false;
      ++t3.promotions;
      t3.bytes_out += static_cast<long>(l3_block_bytes_);
    } else {
      // A miss: the tokens will be prefilled. A corrupt entry is already gone
      // from the store; forget it here too.
      const int block = node->l1;
      node->l1_loading = false;
      // Still resident in L1 here, so neither call can erase the node early.
      if (c.status == tiers::L3Status::kChecksumMismatch || c.status == tiers::L3Status::kNotFound)
        tree_.set_l3(node, false);
      l1_->release(block);
      tree_.set_l1(node, -1);
    }
  }
  // Entries the store let go to make room: the tree forgets them too, or
  // their nodes would linger as ghosts that no lookup can serve (a soak saw
  // the tree grow by a node a request). After the completions: the store
  // commits a write on its own thread, and a later write() may evict that
  // entry before its completion is seen here. Taken first, the eviction would
  // find the node not yet on L3, and the completion then mark it there.
  for (const tiers::BlockKey& key : l3_->store->take_evicted()) {
    CacheNode* node = tree_.find(key);
    if (node == nullptr || !node->l3) continue;
    tree_.set_l3(node, false);  // may erase the node
    ++stats_.tier[2].dropped;
  }
}

void KvCache::start_writeback() {
  // write_back: a block goes to L3 once it has left L1 (it is in L2), so by
  // the time L2 needs its slot it is usually clean and can be let go.
  if (!l3_ || !l2_ || config_.write_policy == WritePolicy::kWriteThrough) return;
  stats_.tier[2].available = l3_->store->accepting();
  if (!stats_.tier[2].available) return;
  constexpr std::size_t kMaxWritesInFlight = 256;
  while (l3_->pending.size() < kMaxWritesInFlight) {
    CacheNode* node =
        tree_.lru(Tier::kL2, [](const CacheNode& m) { return !m.l3 && !m.l3_writing; });
    if (node == nullptr || !write_to_l3(node)) break;
  }
  l3_->store->flush();
}

TierCosts KvCache::calibrate() {
  // The measurement takes the store's completions for its own reads and
  // writes: nothing else may be in flight to have its own taken too.
  drain();
  constexpr int kReads = 8;
  constexpr int kRounds = 5;  // samples of each figure: their median rules
  std::vector<int> blocks;
  for (int i = 0; i < kReads; ++i) {
    auto b = alloc_l1();
    if (!b) break;
    blocks.push_back(*b);
  }
  if (blocks.size() < kReads) {
    for (int b : blocks) l1_->release(b);
    return costs_.costs();  // no room to measure: nothing added
  }
  // Defined contents to move: free blocks hold leftovers, and the int8
  // encoding needs finite floats. (What a decode costs does not depend on
  // the values.)
  const std::vector<std::byte> zeros(block_bytes_);
  l1_->copy(l1_->data(blocks[0]), zeros.data(), block_bytes_);
  if (l2_ && l2_->num_free() > 0) {
    // A promotion: the slot's bytes up into L1 (a copy, or a decode). Into
    // one block each time: an untimed first run faults its pages in, the
    // rest are what a promotion into a block in use costs.
    const int slot = *l2_->allocate();
    to_l2_(l2_->data(slot), l1_->data(blocks[0]));
    for (int i = 0; i <= kRounds; ++i) {
      const auto start = Clock::now();
      from_l2_(l1_->data(blocks[1]), l2_->data(slot));
      if (i > 0) costs_.add_l2_block(std::chrono::duration<double>(Clock::now() - start).count());
    }
    l2_->release(slot);
  }
  if (l3_ && l3_->store->stats().available) {
    // An int8 store reads into staging and decodes, as poll_l3() does.
    std::vector<int> staged;
    if (l3_->staging) {
      for (int i = 0; i < kReads; ++i) staged.push_back(l3_->staging->allocate().value());
      l3_encode_(l3_->staging->data(staged[0]), l1_->data(blocks[0]));
    }
    auto read_buffer = [&](int i) {
      return staged.empty() ? l1_->data(blocks[i]) : l3_->staging->data(staged[i]);
    };
    tiers::L3Record probe;
    probe.key = {0xFFFFFFFFFFFFFFFFULL, 0x6b76746965722d70ULL};  // on no chain
    probe.fingerprint = fingerprint_;
    l3_->store->write(probe, read_buffer(0));
    l3_->store->drain();
    (void)l3_->store->poll();
    // One read, then kReads at once: latency + n * per_block fits both.
    auto timed_reads = [&](int n) {
      const auto start = Clock::now();
      for (int i = 0; i < n; ++i) l3_->store->read(probe.key, fingerprint_, read_buffer(i));
      l3_->store->drain();
      bool ok = true;
      for (const tiers::L3Completion& done : l3_->store->poll())
        ok = ok && done.status == tiers::L3Status::kOk;
      for (int i = 0; ok && !staged.empty() && i < n; ++i)
        l3_decode_(l1_->data(blocks[i]), read_buffer(i));
      return ok ? std::chrono::duration<double>(Clock::now() - start).count() : -1.0;
    };
    for (int i = 0; i < kRounds; ++i) {
      const double one = timed_reads(1);
      const double many = timed_reads(kReads);
      if (one <= 0 || many <= 0) continue;
      const double per_block = std::max(0.0, (many - one) / (kReads - 1));
      costs_.add_l3(std::max(0.0, one - per_block), per_block);
    }
    l3_->store->erase(probe.key);
    for (int b : staged) l3_->staging->release(b);
  }
  for (int b : blocks) l1_->release(b);
  return costs_.costs();
}

bool KvCache::write_to_l3(CacheNode* node) {
  if (device_failed_) return false;
  const bool from_l2 = node->l2 >= 0;
  const std::byte* src = from_l2 ? l2_->data(node->l2) : l1_->data(node->l1);
  // An L2 slot in L3's format is written as it is (host memory, its slot
  // page-aligned); anything else (L1, or an exact slot for an int8 L3) is
  // encoded or copied into a staging buffer that lives until the write
  // completes.
  int staging = -1;
  const bool as_stored = from_l2 && config_.l2_format == config_.l3_format;
  if (l3_->staging && !as_stored) {
    staging = l3_->staging->allocate().value();  // never empty: see L3Parts
    l3_encode_(l3_->staging->data(staging), src);
    src = l3_->staging->data(staging);
  }
  // Asked once the bytes are taken: a failure before then shows.
  if (device_failed()) {
    if (staging >= 0) l3_->staging->release(staging);
    return false;
  }
  tiers::L3Record record;
  record.key = node->key;
  record.parent = node->parent == nullptr ? tiers::BlockKey{} : node->parent->key;
  record.fingerprint = fingerprint_;
  record.tokens.assign(node->tokens.begin(), node->tokens.end());
  node->l3_writing = true;
  int l1_source = -1;
  if (!from_l2) {
    // The extra reference keeps the block in L1 until the write completes
    // (and, with staging, bounds the buffers in use: see L3Parts).
    l1_source = node->l1;
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
  ++stats_.tier[0].io_errors;
  warnings_.push_back("the device that holds L1 failed (" + why +
                      "): nothing more is written to L3, which keeps what it has");
  return true;
}

int KvCache::persist() {
  if (!l3_ || !l3_->store->accepting()) {
    drain();
    return 0;
  }
  const int written =
      write_down_to_l3([](const CacheNode& n) { return n.l2 >= 0 || n.usable_l1(); });
  if (auto synced = l3_->store->sync(); !synced)
    warnings_.push_back("L3 sync: " + synced.error() +
                        "; a power loss may lose blocks written since (their checksums keep "
                        "them from being served)");
  return written;
}

void KvCache::drain() {
  while (transfers_in_flight() > 0) {
    if (copier_) copier_->drain();
    if (queue_)
      if (auto ok = queue_->drain(); !ok) lose_queue(ok.error());
    if (l3_) l3_->store->drain();
    collect();
  }
}

std::size_t KvCache::transfers_in_flight() const {
  return moves_.size() + (l3_ ? l3_->pending.size() : 0);
}

void KvCache::await_layer(const LayerLoad& load, int layer) {
  // Copies: completions are taken from the worker or queue but handled by
  // the next collect(); meanwhile the engine copies beside the worker. A copy
  // the lost queue had in flight never lands: collect() fails it, and
  // settle() then throws the pass away.
  auto copied = [&](std::uint64_t t) {
    return !moves_.contains(t) || early_tickets_.contains(t) ||
           (queue_lost_ && (t & kQueueTicket) != 0);
  };
  auto take = [&] {
    for (const tiers::CopyCompletion& c : poll_moves()) {
      early_.push_back(c);
      early_tickets_.insert(c.ticket);
    }
  };
  for (const std::vector<std::uint64_t>& copies : load.copies) {
    const std::uint64_t ticket = copies[static_cast<std::size_t>(layer)];
    for (take(); !copied(ticket); take())
      if (!copier_ || !copier_->help()) sleep_for_signal(std::chrono::milliseconds(1));
  }
  for (const std::uint64_t ticket : load.reads) {
    for (;;) {
      const std::optional<int> landed = l3_->store->landed(ticket);
      if (!landed || *landed > layer) break;
      // A submission the kernel refused leaves the pieces in the ring, and
      // nothing in flight would wake the completion thread to retry it.
      l3_->store->flush();
      sleep_for_signal(std::chrono::milliseconds(2));
    }
  }
}

void KvCache::count(const LayerLoad::Counted& c, int sign) {
  stats_.lookups += sign;
  for (int t = 0; t < kNumTiers; ++t) stats_.tier[t].hits += sign * c.hits[t];
  stats_.missed_blocks += sign * c.missed;
  stats_.skipped_loads += sign * c.skipped;
  stats_.recompute_tokens_avoided += sign * c.tokens;
}

bool KvCache::settle(const LayerLoad& load) {
  // Every piece has landed (the last layer waited for them); the completions
  // that carry the checksums' verdicts may still be on their way.
  auto in_flight = [&] {
    return std::any_of(load.reads.begin(), load.reads.end(),
                       [&](std::uint64_t t) { return l3_->pending.contains(t); });
  };
  for (collect(); in_flight(); collect()) sleep_for_signal(std::chrono::milliseconds(2));
  std::vector<CacheNode*> landed;
  for (std::size_t i = 0; i < load.keys.size(); ++i) {
    CacheNode* node = tree_.find(load.keys[i]);
    if (node == nullptr || node->l1 != load.blocks[i] || node->l1_loading) {
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
  while (copier_ && copier_->help()) helped = true;
  if (helped) return;
  sleep_for_signal(timeout);
}

bool KvCache::layers_tile_block(std::size_t alignment) const {
  const std::size_t layer = layout_.layer_bytes();
  return layout_.n_layer > 1 && layer % alignment == 0 &&
         layer * static_cast<std::size_t>(layout_.n_layer) == block_bytes_;
}

void KvCache::sleep_for_signal(std::chrono::milliseconds timeout) {
  std::unique_lock lock(wake_->mu);
  wake_->cv.wait_for(lock, timeout, [&] { return wake_->signalled; });
  wake_->signalled = false;
}

std::vector<int> KvCache::l1_ref_counts() const {
  std::vector<int> refs = l1_io_refs_;
  for (const CacheNode* n : tree_.nodes())
    if (n->l1 >= 0) ++refs[static_cast<std::size_t>(n->l1)];
  return refs;
}

CacheStats KvCache::stats() const {
  CacheStats s = stats_;
  s.nodes = tree_.size();
  s.costs = costs_.costs();
  s.tier[0].capacity_blocks = static_cast<std::size_t>(l1_->num_blocks());
  s.tier[0].used_blocks = static_cast<std::size_t>(l1_->num_blocks() - l1_->num_free());
  if (l2_) {
    s.tier[1].capacity_blocks = static_cast<std::size_t>(l2_->num_blocks());
    s.tier[1].used_blocks = static_cast<std::size_t>(l2_->num_blocks() - l2_->num_free());
  } else {
    s.tier[1].available = false;
  }
  if (l3_) {
    const tiers::L3Stats s3 = l3_->store->stats();
    s.tier[2].capacity_blocks = s3.capacity_blocks;
    s.tier[2].used_blocks = s3.used_blocks;
    s.tier[2].available = s3.available;
    s.tier[2].io_errors = s3.io_errors;
    s.tier[2].checksum_failures = s3.checksum_failures;
  } else {
    s.tier[2].available = false;
  }
  for (int t = 0; t < kNumTiers; ++t) {
    s.tier[t].transfer = latency_[t].summary();
    s.tier[t].block_bytes = stored_bytes(static_cast<Tier>(t));
  }
  s.tier[1].format = config_.l2_format;
  s.tier[2].format = config_.l3_format;
  return s;
}

TreeSummary KvCache::summarize(int top) const {
  TreeSummary s;
  std::unordered_map<const CacheNode*, TreeSummary::Family> families;
  for (const CacheNode* n : tree_.nodes()) {
    ++s.nodes;
    const bool in[kNumTiers] = {n->l1 >= 0, n->l2 >= 0, n->l3};
    const CacheNode* first = n;
    while (first->parent != nullptr) first = first->parent;
    TreeSummary::Family& f = families[first];
    ++f.nodes;
    f.depth = std::max(f.depth, n->depth);
    for (int t = 0; t < kNumTiers; ++t) {
      s.blocks[t] += in[t];
      f.blocks[t] += in[t];
    }
    s.leaves += n->children == 0;
    s.max_depth = std::max(s.max_depth, n->depth);
    s.pinned += n->pins > 0;
    s.held += n->holds > 0;
    s.in_flight += n->l1_loading || n->l3_writing;
  }
  for (auto& [first, f] : families) {
    f.first_key = tiers::to_hex(first->key);
    f.first_tokens = first->tokens;
    s.largest.push_back(std::move(f));
  }
  std::sort(s.largest.begin(), s.largest.end(), [](const auto& a, const auto& b) {
    return a.nodes != b.nodes ? a.nodes > b.nodes : a.first_key < b.first_key;
  });
  if (static_cast<int>(s.largest.size()) > top) s.largest.resize(static_cast<std::size_t>(top));
  return s;
}

std::expected<void, std::string> KvCache::check_invariants() const {
  std::vector<int> l2_owners(l2_ ? static_cast<std::size_t>(l2_->num_blocks()) : 0, 0);
  for (const CacheNode* n : tree_.nodes()) {
    const std::string name = "cache block " + tiers::to_hex(n->key);
    if (n->l1 >= 0 && !l1_->is_allocated(n->l1))
      return std::unexpected(name + " names free L1 block " + std::to_string(n->l1));
    if (n->l2 >= 0) {
      if (!l2_ || !l2_->is_allocated(n->l2))
        return std::unexpected(name + " names free L2 slot " + std::to_string(n->l2));
      if (++l2_owners[n->l2] > 1)
        return std::unexpected("L2 slot " + std::to_string(n->l2) + " belongs to two blocks");
    }
    if (!n->resident() && n->children == 0 && !n->l3_writing && n->pins == 0 && n->holds == 0)
      return std::unexpected(name + " holds nothing and should have been erased");
  }
  return {};
}

}  // namespace kvtier

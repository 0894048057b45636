// The tiered prefix cache: which full KV blocks are kept, in which tier, and
// the moves between tiers. The radix tree (radix_cache.h) says what exists;
// the placement policy (placement_policy.h, where the policy is written
// down) chooses what moves; this class performs the moves.
//
//   L1  the engine's block pool (the scheduler's); a cached block there can be
//       shared by a new request at once;
//   L2  a pinned host pool (tiers::BlockPool, Memory::kPinned, or the host
//       memory a device L1's link offers) and the moves between it and L1
//       in the background (tiers::L2Store), optional;
//   L3  the SSD store (tiers::L3Store), optional; like every store tier
//       (engine/cache/store_tiers.h says which a configuration opens) a
//       tiers::BlockStore, driven through one set of paths.
//
// Where each job lives:
//   kv_cache.cpp          making the cache, lookup and promotion, insert,
//                         demotion, pins, holds and flush;
//   kv_cache_moves.cpp    L1<->L2 moves in the background (tiers/l2_store.h)
//                         and on the engine thread, and waiting for loads;
//   kv_cache_stores.cpp   the store tiers (L3 and below, store_tiers.h), one
//                         path for all: reads, writes, write-back, persist,
//                         adoption of entries from before a restart;
//   kv_cache_swap.cpp     what swapped-out requests keep (SwapTicket);
//   cost_calibration.cpp  measuring the tiers for the cost model;
//   kv_cache_stats.cpp    stats, the tree summary and the invariants;
//   transfer_plan.h       how bytes change on their way (formats, staging);
//   cache_handles.h       what the scheduler holds: leases and swap tickets.
//
// Promotion: acquire_prefix() starts reads of L2 blocks (moves on the copy
// worker, tiers/copy_worker.h, or a device's copy queue) and store reads
// (from the fastest store that has the block), both into fresh L1 blocks (an
// int8 store reads into a staging buffer, decoded into the L1 block by
// poll()); the request waits (the engine does not) until they complete, and
// then shares the blocks. L2 reads and store reads complete alike, as
// tickets (tiers::StoreCompletion), and come in layer by layer alike.
//
// L1 in device memory (a pool whose blocks the host cannot address, such as
// tiers::cuda_device_region's): store reads, and writes from L1, go through
// host staging buffers, and the int8 codec runs on the device when create() is
// given one (DeviceKvCodec), else on the host, which reads and writes such a
// block through a host buffer of the calling thread's. When the pool offers a
// DeviceLink (tiers/block_pool.h), L2 lies in the host memory it offers
// (page-locked by the device's driver), and exact L1<->L2 moves in the
// background run on its copy queue (a CUDA stream; tiers/copy_queue.h),
// whose completions come through poll() like the worker's. Should the queue
// fail (a lost device), its moves in flight complete failed and are thrown
// away as if never made: a promoted block leaves L1 (a pass computed on it by
// layer is thrown away by settle()), a cleaned one stays there; the copy
// worker takes over. A flush, or an admission freeing several blocks, moves
// its blocks to L2 the background way and waits for them
// (copy_to_l2_now); single demotions and stashes are the pool's own copies
// on the engine thread.
//
// Sliding windows (KvLayout::layers_reading): a read from L2 or L3 leaves
// out the layers of a block that no query of the request reads, so that a
// long prefix of a windowed model comes up in a fraction of its bytes
// (TierStats::bytes_skipped; the remote tier reads whole, its values being
// signed whole). The L1 copy then lacks them
// (CacheNode::absent_layers): it serves the requests that need none of them,
// is never copied to another tier, and gives way to the whole block when a
// request computes it. A request that needs a layer a copy lacks recomputes
// from that block on: at most a window's worth of blocks.
//
// Reference counting in L1: the cache holds one pool reference per node in
// L1 and one per block being read by a transfer in flight (a store write
// from L1, a copy to L2); requests hold theirs. So a node is demotable
// exactly when the pool's count is 1.
//
// Not thread-safe: the engine thread calls everything; L2 copy and store
// completions arrive through poll().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/cache/block_event.h"
#include "engine/cache/cache_config.h"
#include "engine/cache/cache_handles.h"
#include "engine/cache/cache_stats.h"
#include "engine/cache/cost_model.h"
#include "engine/cache/placement_policy.h"
#include "engine/cache/radix_cache.h"
#include "engine/cache/store_tiers.h"
#include "engine/cache/transfer_plan.h"
#include "engine/model/kv_layout.h"
#include "engine/model/sequence_kv.h"
#include "tiers/block_pool.h"
#include "tiers/l2_store.h"
#include "tiers/wake_signal.h"
#include "util/latency_stats.h"

namespace kvtier::tiers {
class BlockStore;
struct StoreCompletion;
}  // namespace kvtier::tiers

namespace kvtier {

class KvCache {
 public:
  // `l1` is the engine's pool (shared with the scheduler, outliving the
  // cache). Blocks must be a multiple of each store's alignment (L3: 4096
  // bytes, O_DIRECT straight from and into L1). Fails with a message for a
  // pool whose blocks are too small for the layout or misaligned, and for
  // formats config.validate() refuses; a store that cannot be opened is not
  // an error: the cache runs without it, warnings() says why and its tier
  // reports available = false. An int8 store's tag includes the format, so
  // a store written exact (or the other way round) starts empty, with a
  // warning. `codec`
  // serves int8 tiers when l1 is device memory (see DeviceKvCodec).
  static std::expected<std::unique_ptr<KvCache>, std::string> create(
      const KvLayout& layout, std::uint64_t fingerprint, tiers::BlockPool& l1,
      const CacheConfig& config, const DeviceKvCodec& codec = {});
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // The chain root for requests with this salt.
  tiers::BlockKey root(std::string_view cache_salt) const;

  // Which tiers hold the first full blocks of tokens (at most max_blocks).
  // Looks in the stores too (L3's index), so it sees blocks from before a
  // restart.
  PrefixLookup lookup(const tiers::BlockKey& root, std::span<const int> tokens, int max_blocks);

  // For admission: makes the cached run of the first full blocks of tokens
  // (at most max_blocks) usable in L1, and when it is, leases it: a pool
  // reference on each block, in order (possibly none; see PrefixLease).
  // What only a store has is loaded, recomputed, or split between the two,
  // as the cost model's plan says for a prefill of `shape`
  // (CostModel::plan). Returns nullopt while copies or store reads for it
  // are in flight, or a store is still asking what it has of it (the remote
  // tier): try again after a later poll(). A request that may start while
  // its blocks land (`early`: a fresh one, not a swapped one) is leased its
  // run at once when the only missing blocks are on their way up by layer
  // (and load_by_layer is on, see CacheConfig), or when the plan splits the
  // run; those moves are the lease's load(). Takes at most
  // `l1_blocks_allowed` free L1 blocks for promotions and recomputed blocks.
  std::optional<PrefixLease> acquire_prefix(const tiers::BlockKey& root,
                                            std::span<const int> tokens, int max_blocks,
                                            int l1_blocks_allowed, bool early = false,
                                            const PrefillShape& shape = {});
  // Returns once layer `layer` of every block of `load` is in L1
  // (unverified; see LayerLoad).
  void await_layer(const LayerLoad& load, int layer);
  // Whether every read of `load` has completed (handling the completions
  // that came in): settle() then takes no wait.
  bool arrived(const LayerLoad& load);
  // Waits for the reads of `load` to complete and handles them: true when
  // every block arrived intact. False: a block failed (its checksum, the
  // read, or the copy) and is gone from L1, and whatever was computed from
  // the load must be thrown away. Either way the load is over; the caller still
  // holds its references on the blocks.
  bool settle(const LayerLoad& load);

  // Adds the full blocks of a sequence to the cache: blocks[i] holds tokens
  // [i*P, (i+1)*P). Blocks already cached (same key) are left as they are;
  // new ones take a pool reference.
  void insert(const tiers::BlockKey& root, std::span<const int> tokens,
              std::span<const int> blocks);

  // Frees L1 blocks by demoting unheld cached ones until the pool has n free;
  // false if it cannot.
  bool make_free_l1(int n);
  // L1 blocks the cache could free right now (cached, held by no request).
  int demotable_l1() const;

  // Swap-out of a request whose blocks may be shared: its full blocks join
  // the cache as insert() adds them and are held until the ticket goes;
  // `partial` (or -1) is its last, partial block, at block-table index
  // `partial_index`, copied (encoded, with an int8 L2) into an L2 slot of its
  // own, when L2 can free one (else it will be recomputed).
  SwapTicket swap_out(const tiers::BlockKey& root, std::span<const int> tokens,
                      std::span<const int> blocks, int partial, int partial_index, int length,
                      int table_size);
  // Swap-out of a private block table (an eviction policy's KV is not
  // shared): every resident block into an L2 slot of its own; nullopt,
  // keeping nothing, when L2 cannot take them all.
  std::optional<SwapTicket> swap_out_private(std::span<const int> table, int length);
  // The KV a request resumes with, holding `length` positions: the lease's
  // blocks in order, and with `swapped` the blocks its ticket stashed, copied
  // (decoded) back into fresh L1 blocks: after the lease's, or for a private
  // table (SwapTicket::private_table) at their own indices, the table's holes
  // staying holes. Every block's reference passes to the SequenceKv; the
  // ticket keeps its holds, the lease its load. nullopt, changing nothing,
  // when L1 has no room for the stashed blocks.
  std::optional<SequenceKv> resume(PrefixLease& lease, SwapTicket* swapped, int length);

  // Pins the cached prefix of tokens (delta +1) or unpins it (-1); returns
  // how many blocks it changed.
  int pin(const tiers::BlockKey& root, std::span<const int> tokens, int delta);

  // Empties a tier of every unheld, unpinned block. What the tier below can
  // keep goes there first, whatever the write policy: L1's blocks to L2 (as
  // make_free_l1 would demote them), or to the fastest store (L3) without an
  // L2; L2's blocks to that store (waiting for the writes). Only what no
  // lower tier can take, and all of a store tier, is dropped. Returns the
  // blocks that left the tier.
  int flush(Tier tier);

  // Handles L2 copy and store completions, then starts cleaning and
  // background writeback. Call once per engine step.
  void poll();
  // Waits for every L2 copy and store operation in flight (shutdown, tests).
  void drain();
  // For an engine with nothing to compute but requests waiting for blocks:
  // runs the queued L1<->L2 copies itself, beside the copy worker, and when
  // none is queued but a transfer is in flight, sleeps until one completes
  // (or timeout).
  void wait(std::chrono::milliseconds timeout);
  // L2 copies and store operations in flight.
  std::size_t transfers_in_flight() const;
  // Writes every cached block each store lacks (from L2, or straight from
  // L1), waits and syncs it (L3Store::sync): after it, a restart on the same
  // l3_path, even after a power loss, finds everything this cache held. The
  // destructor calls it, so a clean shutdown loses nothing (write_back
  // included). Returns the blocks written.
  int persist();

  // Measures what a block costs to bring up from L2 (a copy, or a decode
  // from an int8 L2) and to read from each store (one read, then several at
  // once: the fixed latency and the per-block part; an int8 store's decode
  // included),
  // several times each, and adds every measurement to the cost model.
  // Returns the cost model's figures then (prefill is not measured here:
  // the scheduler adds its passes). Call at start-up while L1 has free blocks; takes a few
  // milliseconds, after waiting for whatever is in flight (drain()).
  TierCosts calibrate();
  // The load-or-recompute figures (engine/cache/cost_model.h): the scheduler adds
  // its passes' prefill costs; tests and benches may pin them.
  CostModel& cost_model() { return costs_; }
  CacheStats stats() const;
  const RadixCache& tree() const { return tree_; }
  // The model fingerprint its block keys start from (block_hash.h).
  std::uint64_t fingerprint() const { return fingerprint_; }
  // The cache's contents as a stream (block_event.h), for a fleet's router:
  // from now on every time a block becomes stored in a tier or stops being
  // stored there, in order, called on the engine thread from inside the
  // cache's own calls (it must only record the event). Empty: stops.
  void watch(std::function<void(const BlockEvent&)> listener);
  // Every (block, tier) where a block is stored now, each as a `stored`
  // event: the snapshot that the events from now on apply to.
  std::vector<BlockEvent> stored_blocks() const;
  TreeSummary summarize(int top = 8) const;
  std::vector<std::string> warnings() const { return warnings_; }
  // Start-up's words for a tier: its blocks for L1 and L2; for a store tier
  // "off" when the configuration does not ask for it, "unavailable" when it
  // did not open, else its spec's description (store_tiers.h).
  std::string describe(Tier tier) const;
  // Where a store tier was asked to be (StoreTierSpec::where); empty when
  // the configuration does not ask for it.
  const std::string& where(Tier tier) const { return where_[tier]; }
  // References the cache itself holds on each L1 block (for the scheduler's
  // invariant check): 1 for a cached node's block, plus writes in flight.
  std::vector<int> l1_ref_counts() const;
  // An error message if a node's locations disagree with the pools.
  std::expected<void, std::string> check_invariants() const;

 private:
  KvCache(const KvLayout& layout, std::uint64_t fingerprint, tiers::BlockPool& l1,
          const CacheConfig& config, TransferPlan plan, const std::vector<StoreTierSpec>& stores);
  friend class PrefixLease;
  friend class SwapTicket;

  // --- kv_cache.cpp
  std::optional<int> alloc_l1();
  // insert()'s nodes, in order (swap_out holds them).
  std::vector<CacheNode*> insert_path(const tiers::BlockKey& root, std::span<const int> tokens,
                                      std::span<const int> blocks);
  // Holds by key (nodes may move or go; keys stay valid): a held block is
  // the last choice for dropping.
  void hold(std::span<const tiers::BlockKey> keys, int delta);
  // A lease's references on blocks it did not hand over.
  void give_back(std::span<const int> blocks);
  // A free L2 slot, freeing one as `victims` allows when none is.
  std::optional<int> alloc_l2(PlacementPolicy::L2Victims victims);
  void demote_l1(CacheNode* node);
  // Lets go of the L2 copy of a node (counted as dropped when no other tier
  // has the block).
  void drop_l2(CacheNode* node);
  // acquire_prefix's parts: the run of cached blocks worth taking and which
  // of them to recompute, what it takes to bring them up into L1, and
  // handing them out.
  struct PrefixPlan {
    std::vector<CacheNode*> path;  // the blocks taken, in order
    PrefixSplit split;             // those of path recomputed instead (fresh blocks)
    std::vector<int> fresh;        // their L1 blocks, once start_promotions has them
    long skipped = 0;              // blocks recomputed although cached
    bool asking = false;           // a store is still finding out what it has
  };
  PrefixPlan plan_prefix(const tiers::BlockKey& root, std::span<const int> tokens, int max_blocks,
                         bool may_split, const PrefillShape& shape);
  // Starts bringing up the blocks of the plan's path not yet in L1 and takes
  // fresh blocks for its split, shortening it where L1 has no more room (a
  // split with nothing left to load after it is no split); returns whether
  // any block is still on its way. A read (from L2 or a store) leaves out
  // the layers no query of the request reads (KvLayout::layers_reading),
  // its node's absent_layers.
  bool start_promotions(PrefixPlan& plan, int l1_blocks_allowed);
  // A split with nothing after it left to load is a plain recompute from
  // its front: the path ends there, its fresh blocks given back.
  void drop_bare_split(PrefixPlan& plan);
  // Where the request's first computed query sits: its split's recomputed
  // front, else the end of its path.
  int first_query(const PrefixPlan& plan) const;
  // The layers that queries from `from` read of path block `index` and its
  // L1 copy (stored or loading) lacks.
  std::uint64_t missing_layers(const CacheNode& node, int index, int from) const;
  // Ends the path before the first block whose L1 copy lacks a layer the
  // request reads (those blocks are recomputed).
  void cut_missing_layers(PrefixPlan& plan);
  // Whether every block of path still on its way up is coming by layer.
  bool all_by_layer(const std::vector<CacheNode*>& path) const;
  PrefixLease hand_out(PrefixPlan& plan, int wanted);

  // --- kv_cache_swap.cpp
  // A block copied (encoded) into an L2 slot of its own; nullopt without L2
  // or when no slot can be freed.
  std::optional<int> stash(int l1_block);
  // A stashed block copied (decoded) into a fresh L1 block, the caller's
  // reference; the slot stays. nullopt if L1 has no free block.
  std::optional<int> unstash(int l2_slot);
  // What a ticket kept: its holds and stashed slots go.
  void drop(SwapTicket& ticket);

  // --- kv_cache_moves.cpp
  // Makes L2, in the device's host memory when L1 offers it, and the copy
  // queue for exact moves when L2 lies there.
  void open_l2(std::size_t slot_bytes);
  // Starts the read of a node from its L2 slot into its new L1 block, as
  // start_store_read does (its absent_layers left behind where L2's layers
  // come apart, else cleared).
  void start_l2_read(CacheNode* node);
  // Starts background copies of the next L1 demotion candidates to L2.
  void start_cleaning();
  // Queues the copy of a node's L1 block into an L2 slot taken as `victims`
  // allows (an extra L1 reference keeps the block until it lands); its
  // ticket, or nullopt when no slot could be had. The caller flushes L2.
  std::optional<std::uint64_t> start_l2_write(CacheNode* node, PlacementPolicy::L2Victims victims);
  // Copies the L1 blocks of `nodes` that L2 lacks into L2 slots and waits
  // for them, so that demoting them is a release: each copy starts as soon
  // as it is queued, with no wake-up behind it, and is finished as it lands.
  // On a GPU one synchronous copy a block spent a third of its time in the
  // call: a flush ran at 0.62-0.67 of one large device -> pinned copy, and
  // runs at 0.86-0.87 this way (tier_bench, H100). A block that gets no slot
  // or whose copy fails is left to demote_l1.
  void copy_to_l2_now(std::span<CacheNode* const> nodes);
  // Handles one completed L2 move: a promotion or a copy to L2 (cleaning's,
  // counted as cleaned, or copy_to_l2_now's), done, or failed with the lost
  // queue (see the top).
  void finish_move(const tiers::StoreCompletion& c);
  // Whether a read of a load is not handled yet.
  bool read_pending(const LayerLoad::Read& read) const;
  // Handles the completions that have arrived and starts nothing: safe in
  // the middle of a move (alloc_l2 inside demote_l1), where poll() could
  // start cleaning the very block being demoted.
  void collect();
  // An L1<->L2 move on the engine thread (to_l2 or from_l2), timed.
  void move_block(std::byte* dst, const std::byte* src, const TransferPlan::Transfer& how,
                  Tier from, Tier to);
  // `skipped`: bytes of the block left behind (layers no query reads).
  void account_copy(Tier from, Tier to, std::chrono::nanoseconds took, std::size_t skipped = 0);

  // --- kv_cache_stores.cpp: the store tiers (L3 and below), one path for all
  struct StoreTier;  // a store, its staging buffers and what is in flight on it
  // Opens the stores `specs` name (engine/cache/store_tiers.h), fastest first; one
  // that cannot be opened is left out, said in warnings() and its stats.
  void open_stores(const std::vector<StoreTierSpec>& specs);
  // The open store of `tier`, or null.
  StoreTier* store_at(Tier tier) const;
  // The tree's match (RadixCache::match) of the first full blocks of tokens,
  // adopting store entries on the way, in one walk: after a restart the tree
  // is empty but the stores still know every block by its key. Adoption
  // stops at the first block no store can give; the match goes on through
  // the tree.
  //
  // A store that must ask about the blocks (tiers::BlockStore::knows) stops
  // the match at the first block the tree lacks until its answers are in:
  // *asking (when given) is set then, and wait() sleeps for the answers.
  std::vector<CacheNode*> match(const tiers::BlockKey& root, std::span<const int> tokens,
                                int max_blocks, bool* asking = nullptr);
  // Whether every store knows about the `blocks` blocks of `tokens` whose
  // keys chain from `first` (the first block's); asks those that do not.
  bool stores_know(const tiers::BlockKey& first, std::span<const int> tokens, int blocks);
  // Forgets the store copies of a node the stores evicted on their own;
  // whether there were any (the node may be gone then).
  bool forget_evicted(CacheNode* node);
  // A node for `key` from the first store whose entry is this block, or null.
  CacheNode* adopt(const tiers::BlockKey& root, CacheNode* parent,
                   const tiers::BlockKey& parent_key, const tiers::BlockKey& key,
                   std::span<const int> block);
  // Starts the read of a node from its hit_tier's store into its new L1
  // block, without its absent_layers where the store reads by layer (else
  // they are cleared: the block comes whole).
  void start_store_read(CacheNode* node);
  void poll_stores();
  // Handles one completed read or write of store `s`.
  void finish_store_op(StoreTier& s, const tiers::StoreCompletion& c);
  // Starts writes of the L2 blocks a write_back store lacks.
  void start_writeback();
  // Writes every cached block `s` lacks and `wanted` picks (from its L2 slot,
  // else its L1 block) and waits for them, when `s` accepts writes (flush,
  // persist). Returns the writes.
  int write_down(StoreTier& s, const std::function<bool(const CacheNode&)>& wanted);
  // Starts the write of a node to `s` from its L2 slot, or from its L1 block
  // (holding a pool reference until the write completes). Bytes other than
  // an L2 slot in the store's format go through a staging buffer first
  // (encoded, or copied off the device). False, starting nothing, once
  // device_failed().
  bool write_to_store(CacheNode* node, StoreTier& s);
  // Whether the device that holds L1 has failed (DeviceLink::failure; said
  // once, in warnings() and L1's io_errors). What came off it since is
  // garbage that a store's checksum would vouch for, and a restart on a
  // working device would serve: the stores take no more writes. Bytes that
  // left the device before the failure are sound, and a failure is seen by
  // the first write after it, so checking before each write is enough.
  bool device_failed();
  bool accepting(Tier tier) const;  // false for a tier with no open store
  // What a node's block is stored with (engine/cache/block_meta.h).
  std::vector<std::byte> meta_of(const CacheNode& node) const;
  std::size_t store_ops_in_flight() const;                // reads and writes, every store
  bool store_pending(const LayerLoad::Read& read) const;  // not handled yet
  // The read (from L2 or a store) bringing up `key`, if there is one.
  std::optional<LayerLoad::Read> read_in_flight(const tiers::BlockKey& key) const;
  // A held node's store entries are protected from the stores' own eviction.
  void protect_in_stores(const CacheNode& node);
  void flush_stores();  // starts what the stores queued

  // --- cost_calibration.cpp
  // Promotes one block from L2, the bytes of l1_source, into l1_target.
  void calibrate_l2(int l1_source, int l1_target);
  // Reads a probe entry from `s` into (or through staging to) these blocks.
  void calibrate_store(StoreTier& s, const std::vector<int>& l1_blocks);

  // --- kv_cache_stats.cpp
  // Adds (sign +1) or takes back (-1) what acquire_prefix counted for a run.
  void count(const LayerLoad::Counted& counted, int sign);

  KvLayout layout_;
  TransferPlan plan_;
  std::uint64_t fingerprint_;
  tiers::BlockPool* l1_;
  CacheConfig config_;
  std::vector<std::string> warnings_;
  // Each store tier asked for, opened or not (store_tiers.h).
  PerTier<std::string> where_;
  PerTier<std::function<std::string(const TierStats&)>> describe_;
  // What L2 moves and store operations wake the engine with. Before l2_
  // and stores_: their threads hold its wakers.
  tiers::WakeSignal wake_;
  std::unique_ptr<tiers::L2Store> l2_;
  std::vector<std::unique_ptr<StoreTier>> stores_;  // the open stores, fastest first
  RadixCache tree_;
  std::unique_ptr<PlacementPolicy> policy_;  // made once l2_ is
  CostModel costs_;
  CacheStats stats_;
  PerTier<util::LatencyStats> latency_;
  // Per L1 block: references held by reads of it in flight (store writes from
  // L1, cleaning copies to L2).
  std::vector<int> l1_io_refs_;
  std::unordered_set<std::uint64_t> copies_now_;  // copy_to_l2_now's L2 tickets in flight
  // Promotions in flight (L2 copies and store reads), by block: a request
  // that finds one of its blocks loading can take the read over as its
  // LayerLoad.
  std::unordered_map<tiers::BlockKey, LayerLoad::Read, tiers::BlockKeyHash> reads_;
  int clean_window_ = 0;  // how many free or clean L1 blocks cleaning aims for
  bool device_failed_ = false;
  // A match found a store asking about blocks since the last poll(): the
  // answers come back like completions, so wait() sleeps for them.
  bool asking_ = false;
};

}  // namespace kvtier

// The prefix cache's bookkeeping and L3's restart against the number of
// cached blocks (10^4, 10^5, 10^6), metadata only: are the per-block costs
// flat in N (no step that scans every node), and does a block's metadata
// stay under 300 bytes?
//
//  * The radix tree (engine/cache/radix_cache.h) with its per-tier LRU indexes,
//    following a 64-byte-block L1 pool's sharing (track_l1), and the
//    placement policy's L1 victim query (engine/cache/placement_policy.h): the
//    structures KvCache's moves go through. KvCache itself is not driven:
//    its L2 slots are whole pages (4 KiB each, 4 GiB at 10^6 blocks).
//    Prompts are chains of 16 blocks of 16 tokens. Per block:
//      memory   heap bytes the tree and its indexes hold once built,
//               counted by this program's operator new/delete (what malloc
//               holds: the usable size plus its 8-byte chunk header), pools'
//               64-byte blocks excluded;
//      insert   insert(), set() into L1 and touch(), building the tree;
//      lookup   match() of whole 16-block prompts drawn at random;
//      victim   l1_victim() and that block's demotion to L2 in the tree
//               (make_free_l1's step), 10^4 blocks;
//      promote  a demoted block back up (loading, stored, out of L2,
//               touched: start_promotions and its completion), 10^4 blocks
//               in random order.
//  * L3's restart: an index (tiers/l3_index.h, RocksDB in a temp dir under
//    /tmp, removed at the end) filled with N entries of the engine's
//    metadata, then L3Index::open timed right after the writer closed it
//    (it reads every entry back, and replays what the writer's log still
//    held). The store's own open (L3Store::open: the index, the in-memory
//    map and LRU order rebuilt from it, the slab) is timed too, on the
//    store's second open (the first allocates the slab and takes the
//    replay), where its slab, a 4 KiB slot per entry however small the
//    block, stays under 1 GiB: 10^4 and 10^5 entries.
//
// One run, figures and ratios from the same run; asserts nothing.
//
//   build/bench/scale_bench
#include <malloc.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/cache/block_hash.h"
#include "engine/cache/block_meta.h"
#include "engine/cache/placement_policy.h"
#include "engine/cache/radix_cache.h"
#include "tiers/block_pool.h"
#include "tiers/l3_index.h"
#include "tiers/l3_store.h"

namespace {

// Heap bytes the calling thread allocated minus those it freed: the radix
// part runs on the main thread alone, while RocksDB's threads count apart.
thread_local long t_heap_bytes = 0;

std::size_t held_bytes(void* p) { return malloc_usable_size(p) + sizeof(std::size_t); }

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p != nullptr) t_heap_bytes += static_cast<long>(held_bytes(p));
  return p;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  t_heap_bytes -= static_cast<long>(held_bytes(p));
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace {

using kvtier::CacheNode;
using kvtier::PlacementPolicy;
using kvtier::Presence;
using kvtier::RadixCache;
using kvtier::Tier;
using kvtier::bench::seconds_since;
using kvtier::tiers::BlockKey;
using kvtier::tiers::BlockPool;
using kvtier::tiers::L3Entry;
using kvtier::tiers::L3Index;
using kvtier::tiers::L3Store;
using Clock = std::chrono::steady_clock;

constexpr long kSizes[] = {10'000, 100'000, 1'000'000};
constexpr int kPage = 16;
constexpr int kChain = 16;               // blocks per prompt; divides every size
constexpr int kVocab = 50257;            // GPT-2's
constexpr std::size_t kBlockBytes = 64;  // the pools' blocks: metadata only
constexpr int kMoves = 10'000;           // blocks demoted and promoted per pass
constexpr int kLookupPrompts = 1024;     // prompts matched per pass
constexpr int kPasses = 5;               // best of, for lookup, victim, promote
constexpr std::uint64_t kL3Tag = 0x5ca1eULL;
constexpr std::size_t kL3BlockBytes = 64;  // any size > 0 takes a 4 KiB slot
constexpr std::size_t kSlotBytes = 4096;
constexpr long kStoreMaxEntries = 100'000;  // its slab: 400 MiB
constexpr std::size_t kPutBatch = 1000;

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Prompt p's tokens, the same on every run.
void fill_prompt(std::span<int> out, long p) {
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<int>(splitmix((static_cast<std::uint64_t>(p) << 20) + i) % kVocab);
}

struct RadixFigures {
  double bytes = 0;                                        // per block
  double insert = 0, lookup = 0, victim = 0, promote = 0;  // ns per block
};

RadixFigures measure_radix(long blocks) {
  const long prompts = blocks / kChain;
  constexpr std::size_t kPromptTokens = kChain * kPage;
  // Every prompt's tokens, made before the clock and the heap count start.
  std::vector<int> tokens(static_cast<std::size_t>(prompts) * kPromptTokens);
  for (long p = 0; p < prompts; ++p)
    fill_prompt(
        std::span(tokens).subspan(static_cast<std::size_t>(p) * kPromptTokens, kPromptTokens), p);
  auto prompt = [&](long p) {
    return std::span<const int>(tokens).subspan(static_cast<std::size_t>(p) * kPromptTokens,
                                                kPromptTokens);
  };
  std::mt19937 rng(42);
  std::vector<long> sample(kLookupPrompts);
  for (long& p : sample) p = std::uniform_int_distribution<long>(0, prompts - 1)(rng);
  std::vector<CacheNode*> path;
  path.reserve(kChain);
  std::vector<CacheNode*> moved;
  moved.reserve(kMoves);

  BlockPool l1(kBlockBytes, static_cast<int>(blocks));
  BlockPool l2(kBlockBytes, kMoves);
  RadixFigures f;
  const long heap_before = t_heap_bytes;
  RadixCache tree(kPage);
  tree.track_l1(l1);
  const PlacementPolicy policy(tree, &l2);
  const BlockKey root = kvtier::root_key(1, "");

  const auto start = Clock::now();
  for (long p = 0; p < prompts; ++p) {
    path.clear();
    CacheNode* parent = nullptr;
    for (int b = 0; b < kChain; ++b) {
      CacheNode* n = tree.insert(root, parent, prompt(p).subspan(b * kPage, kPage));
      tree.set(n, Tier::kL1, {Presence::kStored, *l1.allocate()});
      path.push_back(n);
      parent = n;
    }
    tree.touch(path);
  }
  f.insert = seconds_since(start) * 1e9 / static_cast<double>(blocks);
  f.bytes = static_cast<double>(t_heap_bytes - heap_before) / static_cast<double>(blocks);

  std::size_t matched = 0;
  const double lookup_s = kvtier::bench::best_seconds(kPasses, [&] {
    for (long p : sample) matched += tree.match(root, prompt(p), kChain).size();
  });
  if (matched != static_cast<std::size_t>(kPasses) * kLookupPrompts * kChain)
    std::printf("  (N=%ld: %zu blocks matched, not every prompt whole)\n", blocks, matched);
  f.lookup = lookup_s * 1e9 / (kLookupPrompts * kChain);

  f.victim = f.promote = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) {
    moved.clear();
    auto t = Clock::now();
    for (int i = 0; i < kMoves; ++i) {
      CacheNode* n = policy.l1_victim();
      const int block = n->slot(Tier::kL1);
      tree.set(n, Tier::kL2, {Presence::kStored, *l2.allocate()});
      tree.set(n, Tier::kL1, {});
      l1.release(block);
      moved.push_back(n);
    }
    f.victim = std::min(f.victim, seconds_since(t) * 1e9 / kMoves);
    std::shuffle(moved.begin(), moved.end(), rng);
    t = Clock::now();
    for (CacheNode* n : moved) {
      const int block = *l1.allocate();
      n->hit_tier = Tier::kL2;
      tree.set(n, Tier::kL1, {Presence::kLoading, block});
      tree.set(n, Tier::kL1, {Presence::kStored, block});
      const int slot = n->slot(Tier::kL2);
      tree.set(n, Tier::kL2, {});
      l2.release(slot);
      tree.touch(std::span(&n, 1));
    }
    f.promote = std::min(f.promote, seconds_since(t) * 1e9 / kMoves);
  }
  return f;
}

// Bytes of the files under dir.
std::uintmax_t disk_bytes(const std::filesystem::path& dir) {
  std::uintmax_t sum = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) sum += e.file_size();
  return sum;
}

struct RestartFigures {
  double index_s = NAN;  // L3Index::open
  double store_s = NAN;  // L3Store::open, where measured
  double index_mib = 0;  // on disk
};

// Writes `entries` index entries under dir/index, each with the metadata the
// engine writes for a 16-token block and a slot of its own.
bool fill_index(const std::filesystem::path& dir, long entries) {
  auto opened = L3Index::open((dir / "index").string(), kL3Tag, kL3BlockBytes);
  if (!opened) {
    std::printf("  L3 index: %s\n", opened.error().c_str());
    return false;
  }
  std::vector<int> tokens(kPage);
  fill_prompt(tokens, 0);
  const std::vector<std::byte> meta = kvtier::encode_block_meta({1, 2}, 1, tokens);
  std::vector<L3Entry> batch;
  batch.reserve(kPutBatch);
  for (long i = 0; i < entries; ++i) {
    const auto u = static_cast<std::uint64_t>(i);
    L3Entry e;
    e.record.key = {splitmix(2 * u), splitmix(2 * u + 1)};
    e.record.meta = meta;
    e.offset = u * kSlotBytes;
    e.length = kL3BlockBytes;
    e.checksum = splitmix(u ^ 0xc0ffeeULL);
    e.last_use = u + 1;
    batch.push_back(std::move(e));
    if (batch.size() == kPutBatch || i + 1 == entries) {
      if (auto ok = opened->index->put(batch); !ok) {
        std::printf("  L3 index: %s\n", ok.error().c_str());
        return false;
      }
      batch.clear();
    }
  }
  return true;
}

RestartFigures measure_restart(const std::filesystem::path& dir, long entries) {
  RestartFigures f;
  std::filesystem::create_directories(dir);  // L3Index::open makes only its own directory
  if (!fill_index(dir, entries)) return f;
  f.index_mib = static_cast<double>(disk_bytes(dir / "index")) / (1 << 20);
  auto start = Clock::now();
  {
    auto opened = L3Index::open((dir / "index").string(), kL3Tag, kL3BlockBytes);
    if (!opened) {
      std::printf("  L3 index: %s\n", opened.error().c_str());
      return f;
    }
    f.index_s = seconds_since(start);
    if (opened->entries.size() != static_cast<std::size_t>(entries))
      std::printf("  (N=%ld: the index read back %zu entries)\n", entries, opened->entries.size());
  }
  if (entries > kStoreMaxEntries) return f;
  kvtier::tiers::L3Options options;
  options.path = dir.string();
  options.capacity_bytes = static_cast<std::size_t>(entries) * kSlotBytes;
  options.block_bytes = kL3BlockBytes;
  options.format_tag = kL3Tag;
  // The first open allocates the slab; the second is the restart.
  for (int open = 0; open < 2; ++open) {
    start = Clock::now();
    auto store = L3Store::open(options);
    if (!store) {
      std::printf("  L3 store: %s\n", store.error().c_str());
      return f;
    }
    f.store_s = seconds_since(start);
    if ((*store)->stats().used_blocks != static_cast<std::size_t>(entries))
      std::printf("  (N=%ld: the store recovered %zu entries)\n", entries,
                  (*store)->stats().used_blocks);
  }
  return f;
}

double ratio(double last, double first) { return first > 0 ? last / first : NAN; }

// value * scale, or "-" where it was not measured.
std::string or_dash(double value, double scale) {
  if (std::isnan(value)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, scale == 1 ? "%.3f" : "%.2f", value * scale);
  return buf;
}

}  // namespace

int main() {
  std::printf("== radix cache bookkeeping: page %d, %d-block prompts, 64-byte pool blocks\n", kPage,
              kChain);
  std::printf("   bytes: heap per block counted by operator new/delete (malloc's view)\n");
  std::printf("   ns/block: insert (build), lookup (match), victim (choose + demote to L2),\n");
  std::printf("   promote (L2 -> L1); lookup, victim and promote best of %d passes\n", kPasses);
  std::printf("  %-10s %10s %10s %10s %10s %10s\n", "blocks", "bytes", "insert", "lookup", "victim",
              "promote");
  std::vector<RadixFigures> radix;
  for (long n : kSizes) {
    radix.push_back(measure_radix(n));
    const RadixFigures& f = radix.back();
    std::printf("  %-10ld %10.1f %10.1f %10.1f %10.1f %10.1f\n", n, f.bytes, f.insert, f.lookup,
                f.victim, f.promote);
    std::fflush(stdout);
  }
  const RadixFigures& a = radix.front();
  const RadixFigures& b = radix.back();
  std::printf("  %-10s %9.2fx %9.2fx %9.2fx %9.2fx %9.2fx\n", "10^6/10^4", ratio(b.bytes, a.bytes),
              ratio(b.insert, a.insert), ratio(b.lookup, a.lookup), ratio(b.victim, a.victim),
              ratio(b.promote, a.promote));

  char tmpl[] = "/tmp/kvtier-scale-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::printf("scale_bench: cannot create a directory under /tmp\n");
    return 1;
  }
  const std::filesystem::path root = tmpl;
  std::printf("\n== L3 restart against index entries (RocksDB under %s)\n", root.c_str());
  std::printf("   index: L3Index::open reading every entry back; store: L3Store::open again\n");
  std::printf("   (slab of 4 KiB slots, measured up to %ld entries)\n", kStoreMaxEntries);
  std::printf("  %-10s %10s %12s %12s %12s %12s\n", "entries", "index MiB", "index s", "index us/e",
              "store s", "store us/e");
  std::vector<RestartFigures> restart;
  for (long n : kSizes) {
    const std::filesystem::path dir = root / std::to_string(n);
    restart.push_back(measure_restart(dir, n));
    std::filesystem::remove_all(dir);
    const RestartFigures& f = restart.back();
    const double per = 1e6 / static_cast<double>(n);
    std::printf("  %-10ld %10.1f %12.3f %12.2f %12s %12s\n", n, f.index_mib, f.index_s,
                f.index_s * per, or_dash(f.store_s, 1).c_str(), or_dash(f.store_s, per).c_str());
    std::fflush(stdout);
  }
  std::filesystem::remove_all(root);
  const double per_first = 1e6 / static_cast<double>(kSizes[0]);
  const double per_last = 1e6 / static_cast<double>(kSizes[2]);
  std::printf("  index us/entry 10^6/10^4: %.2fx; store us/entry 10^5/10^4: %.2fx\n",
              ratio(restart[2].index_s * per_last, restart[0].index_s * per_first),
              ratio(restart[1].store_s * 1e6 / static_cast<double>(kSizes[1]),
                    restart[0].store_s * per_first));
  return 0;
}

// Radix prefix cache operations against prefix length: match, insert and
// evict should cost O(blocks in the prefix), i.e. a constant time per block
// whatever the length and however many other prefixes the tree holds. And
// choosing an L1 victim should not depend on how many blocks running
// requests hold: the same query with the tree following the pool's sharing
// (its in-use index) and without (every block in one index, the query
// stepping past the held ones), in the same run.
// Prints Google Benchmark's table plus ns/block for each length; asserts
// nothing.
//
//   build/bench/radix_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "bench/recording_reporter.h"
#include "engine/cache/block_hash.h"
#include "engine/cache/radix_cache.h"

namespace {

using kvtier::CacheNode;
using kvtier::Presence;
using kvtier::RadixCache;
using kvtier::Tier;

constexpr int kPage = 16;
constexpr int kOtherPrefixes = 2000;            // background population of the tree
constexpr int kHeld[] = {0, 100, 1000, 10000};  // blocks requests hold, for the victim query

// A tree holding kOtherPrefixes unrelated 8-block prefixes, then `tokens`.
struct Fixture {
  RadixCache tree{kPage};
  kvtier::tiers::BlockKey root = kvtier::root_key(1, "");
  int next_block = 0;

  std::vector<CacheNode*> insert(const std::vector<int>& tokens) {
    std::vector<CacheNode*> path;
    CacheNode* parent = nullptr;
    for (std::size_t i = 0; (i + 1) * kPage <= tokens.size(); ++i) {
      CacheNode* n = tree.insert(root, parent, std::span(tokens).subspan(i * kPage, kPage));
      if (!n->in(Tier::kL1)) tree.set(n, Tier::kL1, {Presence::kStored, next_block++});
      path.push_back(n);
      parent = n;
    }
    tree.touch(path);
    return path;
  }

  // The background lives in L2, so L1's LRU index holds only what a
  // benchmark inserts while the tree and its maps stay large.
  Fixture() {
    for (int i = 0; i < kOtherPrefixes; ++i)
      for (CacheNode* n : insert(kvtier::bench::random_tokens(8 * kPage, 50257, 1000 + i))) {
        tree.set(n, Tier::kL2, {Presence::kStored, n->slot(Tier::kL1)});
        tree.set(n, Tier::kL1, {});
      }
  }
};

void BM_Match(benchmark::State& state) {
  const int blocks = static_cast<int>(state.range(0));
  Fixture f;
  const auto tokens = kvtier::bench::random_tokens(blocks * kPage, 50257, 7);
  f.insert(tokens);
  for (auto _ : state) {
    auto path = f.tree.match(f.root, tokens, blocks);
    benchmark::DoNotOptimize(path.data());
  }
  state.counters["blocks"] = blocks;
}

void BM_InsertAndEvict(benchmark::State& state) {
  // One iteration inserts a fresh prefix of `blocks` blocks and evicts it
  // again leaf first through the LRU index, as demotion would.
  const int blocks = static_cast<int>(state.range(0));
  Fixture f;
  const auto tokens = kvtier::bench::random_tokens(blocks * kPage, 50257, 9);
  for (auto _ : state) {
    f.insert(tokens);
    for (int i = 0; i < blocks; ++i) {
      CacheNode* victim = f.tree.lru(Tier::kL1, [](const CacheNode& n) { return n.children == 0; });
      f.tree.set(victim, Tier::kL1, {});
    }
  }
  state.counters["blocks"] = blocks;
}

// `held` blocks that requests share, least recently used, then one block
// only the cache holds: the victim query must pass over the held ones.
void BM_VictimPastHeld(benchmark::State& state, bool tracked) {
  const int held = static_cast<int>(state.range(0));
  kvtier::tiers::BlockPool pool(64, held + 1);
  RadixCache tree(kPage);
  if (tracked) tree.track_l1(pool);
  const auto root = kvtier::root_key(1, "");
  for (int i = 0; i <= held; ++i) {
    CacheNode* n = tree.insert(root, nullptr, kvtier::bench::random_tokens(kPage, 50257, 500 + i));
    const int block = *pool.allocate();
    tree.set(n, Tier::kL1, {Presence::kStored, block});
    tree.touch(std::vector<CacheNode*>{n});
    if (i < held) pool.add_ref(block);  // a request shares it
  }
  auto unused = [&](const CacheNode& n) { return pool.ref_count(n.slot(Tier::kL1)) == 1; };
  for (auto _ : state) benchmark::DoNotOptimize(tree.lru(Tier::kL1, unused));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (int blocks : {1, 4, 16, 64, 256}) {
    benchmark::RegisterBenchmark("match", BM_Match)->Arg(blocks);
    benchmark::RegisterBenchmark("insert+evict", BM_InsertAndEvict)->Arg(blocks);
  }
  for (int held : kHeld) {
    benchmark::RegisterBenchmark("victim/in-use-index", BM_VictimPastHeld, true)->Arg(held);
    benchmark::RegisterBenchmark("victim/one-index", BM_VictimPastHeld, false)->Arg(held);
  }
  kvtier::bench::RecordingReporter capture;
  benchmark::RunSpecifiedBenchmarks(&capture);
  std::printf("\n== radix cache, page %d, %d other prefixes in the tree\n", kPage, kOtherPrefixes);
  std::printf("  %-8s %16s %22s\n", "blocks", "match ns/block", "insert+evict ns/block");
  for (int blocks : {1, 4, 16, 64, 256}) {
    const std::string arg = "/" + std::to_string(blocks);
    std::printf("  %-8d %16.1f %22.1f\n", blocks,
                capture.get("match" + arg, "seconds") * 1e9 / blocks,
                capture.get("insert+evict" + arg, "seconds") * 1e9 / blocks);
  }
  std::printf("\n== L1 victim choice with blocks held by requests (ns per query)\n");
  std::printf("  %-8s %16s %16s %10s\n", "held", "in-use index", "one index", "ratio");
  for (int held : kHeld) {
    const std::string arg = "/" + std::to_string(held);
    const double split = capture.get("victim/in-use-index" + arg, "seconds") * 1e9;
    const double one = capture.get("victim/one-index" + arg, "seconds") * 1e9;
    std::printf("  %-8d %16.1f %16.1f %9.1fx\n", held, split, one, one / split);
  }
  return 0;
}

// The most of a workload's prompt tokens that any fleet could serve from L1:
// the bound a router's L1 hit rate is measured against (docs/bench.md, "A
// router in front of the fleet").
//
// It replays the soak's arrivals (bench/workload.h, same kinds and seed) on
// the fleet's L1 blocks, split and pooled:
//   round-robin  --daemons caches of a share each, least recently used out
//           first, the arrivals dealt in turn: a fleet behind a plain
//           load balancer, the router's baseline;
// and on one pooled cache of them, in two ways:
//   LRU     the pooled blocks evicted least recently used first, as one big
//           daemon would: what a router could reach if it turned three L1s
//           into one;
//   optimal Belady's MIN, which knows the future: on a miss it keeps the
//           blocks used again soonest (or does not keep the new one). No
//           eviction policy on these blocks hits more, and no router either:
//           whatever three L1s hold at a moment, one cache of their summed
//           size could hold, and a request hits only the leading blocks of
//           its prompt on the one daemon that serves it. (MIN maximises
//           every hit, leading or not; and it never keeps a block without
//           its parent, whose next use always comes first, so here every
//           hit it makes is a leading one.)
// Both are upper bounds on a real fleet's figure, which also keeps running
// requests' own blocks in L1. "seen" is the share of prompt tokens whose
// blocks came before at all (an endless cache). Hits count as the daemons
// count them: the leading run of whole blocks of the prompt less its last
// token, times the page. LRU / round-robin is then the most L1 a router in
// front of LRU daemons can gain over round-robin at that size.
//
//   build/bench/l1_ceiling_bench --workload f [--requests 366] [--seed 1]
//                                [--blocks 72,144] [--daemons 3]
//                                [--model models/fortunes-char]
//
// Workload b's next turns depend on the answers, so it is not replayed.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <list>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/workload.h"
#include "engine/cache/block_hash.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

namespace {

using kvtier::tiers::BlockKey;
using kvtier::tiers::BlockKeyHash;

struct Request {
  std::vector<BlockKey> keys;  // whole blocks of the prompt less its last token
  long tokens = 0;             // the prompt's tokens
};

// A cache of `capacity` blocks, least recently used out first.
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {}

  // Serves a prompt's blocks and keeps them; returns the prompt tokens its
  // leading run of cached blocks covers.
  long serve(const Request& r, int page) {
    long hit = 0;
    bool leading = true;
    for (const BlockKey& k : r.keys) {
      const auto it = where_.find(k);
      leading = leading && it != where_.end();
      if (leading) hit += page;
      if (it != where_.end()) order_.erase(it->second);
      order_.push_front(k);
      where_[k] = order_.begin();
      if (order_.size() > capacity_) {
        where_.erase(order_.back());
        order_.pop_back();
      }
    }
    return hit;
  }

 private:
  std::size_t capacity_;
  std::list<BlockKey> order_;  // most recent first
  std::unordered_map<BlockKey, std::list<BlockKey>::iterator, BlockKeyHash> where_;
};

// `daemons` caches of `capacity` / daemons blocks each, least recently used
// out first, the arrivals dealt to them in turn: one daemon holding the
// fleet's L1 with 1 (what a router in front of LRU daemons can approach),
// round-robin's fleet with more.
double lru_rate(const std::vector<Request>& requests, std::size_t capacity, int daemons, int page) {
  std::vector<LruCache> fleet(daemons, LruCache(capacity / daemons));
  long hit = 0, tokens = 0, n = 0;
  for (const Request& r : requests) {
    tokens += r.tokens;
    hit += fleet[n++ % daemons].serve(r, page);
  }
  return tokens ? static_cast<double>(hit) / tokens : 0;
}

// Belady's MIN with bypass on the same references: on each reference the
// cache keeps the `capacity` blocks among its own and the new one whose
// next use comes soonest.
double optimal_rate(const std::vector<Request>& requests, std::size_t capacity, int page) {
  std::vector<BlockKey> refs;
  for (const Request& r : requests) refs.insert(refs.end(), r.keys.begin(), r.keys.end());
  constexpr long kNever = 1L << 62;
  std::vector<long> next(refs.size(), kNever);
  std::unordered_map<BlockKey, long, BlockKeyHash> later;
  for (long i = static_cast<long>(refs.size()) - 1; i >= 0; --i) {
    const auto it = later.find(refs[i]);
    if (it != later.end()) next[i] = it->second;
    later[refs[i]] = i;
  }
  std::set<std::pair<long, BlockKey>> by_next;              // cached blocks by next use
  std::unordered_map<BlockKey, long, BlockKeyHash> cached;  // block -> its next use
  long hit = 0, tokens = 0, i = 0;
  for (const Request& r : requests) {
    tokens += r.tokens;
    bool leading = true;
    for (std::size_t b = 0; b < r.keys.size(); ++b, ++i) {
      const BlockKey& k = refs[i];
      const auto it = cached.find(k);
      leading = leading && it != cached.end();
      if (leading) hit += page;
      if (it != cached.end()) {
        by_next.erase({it->second, k});
        cached.erase(it);
      }
      by_next.insert({next[i], k});
      cached[k] = next[i];
      if (cached.size() > capacity) {  // out goes the one used again last
        const auto last = std::prev(by_next.end());
        cached.erase(last->second);
        by_next.erase(last);
      }
    }
  }
  return tokens ? static_cast<double>(hit) / tokens : 0;
}

double seen_rate(const std::vector<Request>& requests, int page) {
  std::unordered_map<BlockKey, bool, BlockKeyHash> seen;
  long hit = 0, tokens = 0;
  for (const Request& r : requests) {
    tokens += r.tokens;
    bool leading = true;
    for (const BlockKey& k : r.keys) {
      leading = leading && seen.contains(k);
      if (leading) hit += page;
      seen[k] = true;
    }
  }
  return tokens ? static_cast<double>(hit) / tokens : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The most of a workload's prompt tokens any fleet could serve from L1"};
  std::string workload = "f", blocks_list = "72,144";
  std::string model_dir =
      (std::filesystem::path(__FILE__).parent_path().parent_path() / "models" / "fortunes-char")
          .string();
  long requests = 366;
  int daemons = 3;
  std::uint64_t seed = 1;
  int page = 16;
  app.add_option("--workload", workload, "Workload mix, b excepted (see loadgen)")
      ->capture_default_str();
  app.add_option("--requests", requests, "Arrivals replayed (366: the soak's 60 s at 6/s)")
      ->capture_default_str()
      ->check(CLI::Range(1L, 10000000L));
  app.add_option("--seed", seed, "Workload seed")->capture_default_str();
  app.add_option("--blocks", blocks_list, "The fleet's L1 blocks, summed (comma-separated)")
      ->capture_default_str();
  app.add_option("--daemons", daemons, "Round-robin's daemons, each a share of the blocks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--model", model_dir, "Model folder (its tokenizer and context)")
      ->capture_default_str();
  app.add_option("--page", page, "Tokens a block")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);

  const auto kinds = kvtier::bench::parse_kinds(workload);
  if (!kinds || kinds->find('b') != std::string::npos) {
    std::fprintf(stderr,
                 "l1_ceiling_bench: --workload takes letters a, c, d, e, f (b's turns depend "
                 "on the answers)\n");
    return 2;
  }
  std::vector<std::size_t> capacities;
  std::stringstream list(blocks_list);
  for (std::string item; std::getline(list, item, ',');) {
    std::size_t blocks = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), blocks);
    if (ec != std::errc() || end != item.data() + item.size() || blocks == 0) {
      std::fprintf(stderr, "l1_ceiling_bench: --blocks: '%s' is not a number of blocks >= 1\n",
                   item.c_str());
      return 2;
    }
    capacities.push_back(blocks);
  }
  if (capacities.empty()) {
    std::fprintf(stderr, "l1_ceiling_bench: --blocks names no size\n");
    return 2;
  }
  auto config = kvtier::ModelConfig::load(std::filesystem::path(model_dir) / "config.json");
  if (!config) {
    std::fprintf(stderr, "l1_ceiling_bench: --model: %s\n", config.error().c_str());
    return 2;
  }
  auto tokenizer = kvtier::Tokenizer::load(config->tokenizer);
  if (!tokenizer) {
    std::fprintf(stderr, "l1_ceiling_bench: --model: %s\n", tokenizer.error().c_str());
    return 2;
  }

  // The loadgen's arrivals: same kinds, seed and context (bench/loadgen_run.cpp).
  kvtier::bench::Workload arrivals(*kinds, seed, config->block_size,
                                   kvtier::bench::gpt2_bpe_vocab((*tokenizer)->vocab_size()));
  std::vector<Request> replay;
  for (long n = 0; n < requests; ++n) {
    const auto tokens = (*tokenizer)->encode(arrivals.next().prompt);
    if (!tokens) {
      std::fprintf(stderr, "l1_ceiling_bench: %s\n", tokens.error().c_str());
      return 2;
    }
    Request r;
    r.tokens = static_cast<long>(tokens->size());
    if (!tokens->empty())  // the last token is always prefilled
      r.keys = kvtier::chain_keys(kvtier::root_key(0, ""),
                                  std::span(*tokens).first(tokens->size() - 1), page);
    replay.push_back(std::move(r));
  }

  std::printf("workload %s, %ld arrivals, seed %llu, page %d: L1 hit, prompt tokens, at most\n",
              kinds->c_str(), requests, static_cast<unsigned long long>(seed), page);
  std::printf("%12s %12s %10s %10s %10s %14s\n", "fleet L1", "round-robin", "LRU", "optimal",
              "seen", "LRU/round-rob");
  const double seen = seen_rate(replay, page);
  for (std::size_t c : capacities) {
    const double rr = lru_rate(replay, c, daemons, page), lru = lru_rate(replay, c, 1, page);
    std::printf("%5zu blocks %11.1f%% %9.1f%% %9.1f%% %9.1f%% %13.2fx\n", c, 100 * rr, 100 * lru,
                100 * optimal_rate(replay, c, page), 100 * seen, rr > 0 ? lru / rr : 0.0);
  }
}

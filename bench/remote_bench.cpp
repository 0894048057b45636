// The remote tier against a running Redis, on GPT-2 124M shapes (random
// weights from a seed), every figure beside a baseline measured in the same
// run:
//   * store throughput: 640 blocks written (SET NX) and read back (GET)
//     through tiers::RedisStore, in MB/s and blocks/s; compare with
//     redis-benchmark's SET and GET of the same value size and pipeline depth
//     on the same server (scripts/bench_remote.sh runs both);
//   * time to first token of a 1024-token prompt whose first 1008 tokens are
//     in the remote tier, against cold and against L3 (target: remote hit
//     >= 10x faster than cold).
// Prints figures; asserts nothing. Writes only keys under the namespace
// "bench" (SET NX: a second run reuses them) and a temp L3 it removes.
//
//   build/bench/remote_bench --redis ADDRESS [--l3-dir DIR] [--store-only]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/machine_peaks.h"
#include "bench/ttft.h"
#include "engine/model/gpt2/gpt2_model.h"
#include "engine/scheduling/scheduler.h"
#include "tiers/redis_store.h"

namespace {

using namespace kvtier;
using Clock = std::chrono::steady_clock;
using kvtier::bench::random_tokens;
using kvtier::bench::run_all;
using kvtier::bench::seconds_since;
using kvtier::bench::time_to_first_token;
using kvtier::bench::ttft_request;
using kvtier::bench::ttft_scheduler_config;

constexpr int kThreads = 2;
constexpr int kPage = 16;
constexpr int kReps = 3;

// A prefix's 64 blocks written and read back through the store, kPasses
// times over (fresh keys for each written pass: a key written before
// completes without a transfer), timed as a whole: 640 operations each
// way, as many as scripts/bench_remote.sh has redis-benchmark send, so both
// pay the same start (a new connection's TCP window, the allocator's first
// blocks).
void store_throughput(const std::vector<tiers::RedisAddress>& addresses, std::size_t block_bytes) {
  constexpr int kBlocks = 64, kPasses = 10;
  tiers::RedisStoreOptions o;
  o.addresses = addresses;
  o.key_namespace = "bench";
  o.timeout = std::chrono::milliseconds(5000);
  o.block_bytes = block_bytes;
  o.format_tag = 0x62656e6368ULL;
  auto opened = tiers::RedisStore::open(o);
  if (!opened) {
    std::printf("cannot open the store: %s\n", opened.error().c_str());
    return;
  }
  tiers::RedisStore& store = **opened;
  std::vector<std::vector<std::byte>> blocks(kBlocks, std::vector<std::byte>(block_bytes));
  for (int b = 0; b < kBlocks; ++b)
    for (std::size_t i = 0; i < block_bytes; i += 4096) blocks[b][i] = std::byte(b + i);
  const std::vector<std::byte> meta = {std::byte{1}};
  const auto key = [](int pass, int b) {
    return tiers::BlockKey{static_cast<std::uint64_t>(pass + 1), static_cast<std::uint64_t>(b)};
  };
  bool all_ok = true;
  const auto check = [&] {
    for (const tiers::StoreCompletion& c : store.poll())
      all_ok &= c.status == tiers::StoreStatus::kOk;
  };
  const auto write_start = Clock::now();
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int b = 0; b < kBlocks; ++b) store.write({key(pass, b), meta}, blocks[b].data());
    store.drain();
    check();
  }
  const double wrote = seconds_since(write_start);
  std::vector<std::byte> dst(kBlocks * block_bytes);
  const auto read_start = Clock::now();
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int b = 0; b < kBlocks; ++b) store.read(key(pass, b), meta, dst.data() + b * block_bytes);
    store.drain();
    check();
  }
  const double read = seconds_since(read_start);
  const int ops = kBlocks * kPasses;
  const double mb = ops * static_cast<double>(block_bytes) / 1e6;
  std::printf("store, %d blocks of %zu bytes each way, pipelined %zu a round%s:\n", ops,
              block_bytes, std::max<std::size_t>(1, o.round_bytes / block_bytes),
              all_ok ? "" : "  (SOME OPERATIONS FAILED)");
  std::printf("  write (SET NX): %8.1f MB/s %8.1f blocks/s\n", mb / wrote, ops / wrote);
  std::printf("  read (GET):     %8.1f MB/s %8.1f blocks/s\n", mb / read, ops / read);
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::use_best_openblas_kernels(argv);
  std::string redis;
  std::filesystem::path l3_dir = "remote_bench_l3";
  bool store_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--store-only") == 0) store_only = true;
    if (i + 1 == argc) continue;
    if (std::strcmp(argv[i], "--redis") == 0) redis = argv[++i];
    if (std::strcmp(argv[i], "--l3-dir") == 0) l3_dir = argv[++i];
  }
  auto addresses = tiers::parse_redis_addresses(redis);
  if (!addresses) {
    std::printf("usage: remote_bench --redis ADDRESS [--l3-dir DIR] [--store-only]: %s\n",
                addresses.error().c_str());
    return 2;
  }
  omp_set_num_threads(kThreads);
  const auto config = ModelConfig::gpt2_124m();
  const std::size_t block_bytes = KvLayout::of(config, kPage).block_bytes();
  std::printf("\n== the remote tier at %s, GPT-2 124M shapes, block %zu bytes, %d threads\n",
              redis.c_str(), block_bytes, kThreads);
  store_throughput(*addresses, block_bytes);
  if (store_only) return 0;
  std::printf("building GPT-2 124M-shaped random weights...\n");
  Gpt2Model model(config, ModelWeights::random(config, 1));

  // ---- time to first token: remote hit, L3 hit, cold ----------------------
  // One scheduler per store, each L1 + that store, written through.
  std::filesystem::remove_all(l3_dir);
  SchedulerConfig base = ttft_scheduler_config(kPage);
  base.cache.l2_bytes = 0;
  SchedulerConfig remote = base, l3 = base;
  remote.cache.remote = redis;
  remote.cache.remote_namespace = "bench";
  remote.cache.remote_timeout = std::chrono::milliseconds(5000);
  l3.cache.l3_path = (l3_dir / "store").string();
  l3.cache.l3_bytes = 160 * block_bytes;
  const std::vector<int> prompt = random_tokens(1024, config.vocab_size, 11);
  double best[3] = {1e9, 1e9, 1e9};
  int first[3] = {-1, -1, -1};
  const char* names[3] = {label(Tier::kRemote), label(Tier::kL3), "cold"};
  for (int which = 0; which < 2; ++which) {
    auto made = Scheduler::create(model, nullptr, which == 0 ? remote : l3);
    if (!made) {
      std::printf("cannot build the scheduler: %s\n", made.error().c_str());
      return 1;
    }
    Scheduler& s = **made;
    for (const std::string& w : s.cache()->warnings()) std::printf("note: %s\n", w.c_str());
    s.calibrate_tier_costs();
    const LoadCost load = s.cache()->stats().costs.load[which == 0 ? Tier::kRemote : Tier::kL3];
    std::printf("calibrated %s read: %.1f us + %.1f us/block\n", names[which], load.latency_s * 1e6,
                load.per_block_s * 1e6);
    s.cache()->cost_model().pin({});  // every load measured, whatever it would decide
    (void)s.submit(ttft_request({prompt.begin(), prompt.begin() + 1009}, 1));
    run_all(s);
    s.cache()->drain();
    for (int rep = 0; rep < kReps; ++rep) {
      s.cache()->drain();
      s.cache()->flush(Tier::kL1);  // the prefix only in the store
      s.cache()->drain();
      auto [hit, token] = time_to_first_token(s, ttft_request(prompt, 1));
      best[which] = std::min(best[which], hit);
      first[which] = token;
      if (which == 1) {
        s.cache()->drain();
        auto [cold, t] =
            time_to_first_token(s, ttft_request(prompt, 1, "cold-" + std::to_string(rep)));
        best[2] = std::min(best[2], cold);
        first[2] = t;
      }
    }
  }
  std::filesystem::remove_all(l3_dir);
  std::printf("\ntime to first token, 1024-token prompt, 1008 cached (best of %d):\n", kReps);
  std::printf("  %-8s %10s %12s\n", "prefix", "TTFT ms", "vs cold");
  for (int i = 0; i < 3; ++i)
    std::printf("  %-8s %10.1f %11.1fx\n", names[i], best[i] * 1e3, best[2] / best[i]);
  std::printf("  first token identical in all three: %s\n",
              first[0] == first[1] && first[1] == first[2] ? "yes" : "NO");
  std::printf("  ratio remote hit (cold / remote): %.1f  (target >= 10)\n", best[2] / best[0]);
  std::printf("  ratio remote / L3 TTFT: %.2f\n", best[0] / best[1]);
  return 0;
}

// The tiers on GPT-2 124M shapes (random weights from a seed), every figure
// compared with a baseline measured in the same run:
//   * time to first token of a 1024-token prompt whose first 1008 tokens are
//     cached in L1, in L2, in L3, and cold (targets: L2 >= 20x faster than
//     cold, L3 >= 10x); also with L3 blocks moved whole instead of by
//     layer, and from int8 lower tiers;
//   * L1 <-> L2 block copy bandwidth against memcpy, or on a GPU against one
//     large device <-> pinned copy (target >= 0.8);
//   * a workload that forces preemption, run with swap and with recompute:
//     recomputed tokens (swap must have none) and tokens/s.
// Prints figures; asserts nothing.
//
//   build/bench/tier_bench [--l3-dir DIR] [--device cpu|cuda]
//
// --l3-dir: where the L3 stores go (default ./tier_bench_l3, removed after).
// --device cuda: the GPU forward over an L1 in device memory and an L2 in
// pinned host memory (engine/device.h); the block copy is then set against
// a plain device <-> pinned copy measured in the same run.
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/machine_peaks.h"
#include "bench/ttft.h"
#include "engine/device.h"
#include "engine/model/gpt2/gpt2_model.h"
#include "engine/scheduling/scheduler.h"

#if defined(KVTIER_HAVE_CUDA)
#include "tiers/cuda/cuda_copy_stream.h"
#include "tiers/cuda/cuda_memory.h"
#endif

namespace {

using kvtier::bench::random_tokens;
using kvtier::bench::run_all;
using kvtier::bench::seconds_since;
using kvtier::bench::time_to_first_token;
using kvtier::bench::ttft_request;
using kvtier::bench::ttft_scheduler_config;

using namespace kvtier;
using Clock = std::chrono::steady_clock;

constexpr int kThreads = 2;
constexpr int kPage = 16;

// A scheduler over the device asked for: its L1 and forward (the CPU's own
// when the device is cpu). The device is declared first so that its L1
// outlives the scheduler that hands blocks back to it.
struct DeviceScheduler {
  Device device;
  std::unique_ptr<Scheduler> scheduler;
};

std::unique_ptr<DeviceScheduler> make_scheduler(Model& model, const SchedulerConfig& config,
                                                const std::string& kind) {
  auto device = open_device(model, config, {.kind = kind});
  if (!device) {
    std::printf("cannot open the device: %s\n", device.error().c_str());
    return nullptr;
  }
  auto made = std::make_unique<DeviceScheduler>(std::move(*device), nullptr);
  auto s = Scheduler::create(model, nullptr, config, made->device.l1.get(), made->device.forward);
  if (!s) {
    std::printf("cannot build the scheduler: %s\n", s.error().c_str());
    return nullptr;
  }
  made->scheduler = std::move(*s);
  return made;
}

// What the block copy is set against: memcpy on one thread (a block copy is
// one memcpy on the engine thread) on the CPU; on the GPU, one large copy
// from device to pinned host memory (a demotion's direction) and back, with
// the tiers' own copy call. Prints both; returns the demotion direction's.
// On the GPU it also prints the same bytes moved a block at a time, first one
// synchronous call each (a demotion's copies without its bookkeeping), then
// all enqueued on one copy stream and waited for once: what is left of the
// demotion's gap after each.
double baseline_copy_bytes_per_second(const std::string& kind, std::size_t bytes,
                                      std::size_t block_bytes) {
  if (kind == "cpu") {
    const double bw = kvtier::bench::memcpy_bytes_per_second(1);
    std::printf("memcpy, 1 thread: %.2f GB/s\n", bw / 1e9);
    return bw;
  }
#if defined(KVTIER_HAVE_CUDA)
  // Each in a pool of one block, which frees it with the matching CUDA call.
  auto device_region = tiers::cuda_device_region(bytes);
  if (!device_region) {
    std::printf("cannot measure the pinned copy: %s\n", device_region.error().c_str());
    return 0;
  }
  tiers::BlockPool device(bytes, 1, std::move(*device_region));
  auto pinned_region = tiers::cuda_pinned_region(bytes);
  if (!pinned_region) {
    std::printf("cannot measure the pinned copy: %s\n", pinned_region.error().c_str());
    return 0;
  }
  tiers::BlockPool pinned(bytes, 1, std::move(*pinned_region));
  std::memset(pinned.data(0), 1, bytes);
  const double down_s = kvtier::bench::best_seconds(
      5, [&] { tiers::cuda_copy(pinned.data(0), device.data(0), bytes); });
  const double up_s = kvtier::bench::best_seconds(
      5, [&] { tiers::cuda_copy(device.data(0), pinned.data(0), bytes); });
  const double mb = static_cast<double>(bytes);
  std::printf(
      "pinned copy of %.0f MB, one call: device -> host %.2f GB/s, host -> device %.2f GB/s\n",
      mb / 1e6, mb / down_s / 1e9, mb / up_s / 1e9);
  const std::size_t blocks = bytes / block_bytes;
  const double each_s = kvtier::bench::best_seconds(5, [&] {
    for (std::size_t i = 0; i < blocks; ++i)
      tiers::cuda_copy(pinned.data(0) + i * block_bytes, device.data(0) + i * block_bytes,
                       block_bytes);
  });
  std::printf("the same, device -> host a block at a time, one call each: %.2f GB/s (%.2f)\n",
              mb / each_s / 1e9, down_s / each_s);
  if (auto stream = tiers::CudaCopyStream::create()) {
    bool ok = true;
    const double queued_s = kvtier::bench::best_seconds(5, [&] {
      for (std::size_t i = 0; i < blocks; ++i)
        ok = ok && (*stream)
                       ->copy(pinned.data(0) + i * block_bytes, device.data(0) + i * block_bytes,
                              block_bytes)
                       .has_value();
      ok = ok && (*stream)->drain().has_value() && (*stream)->poll().has_value();
    });
    if (ok)
      std::printf("the same, a block at a time on one copy stream, one wait: %.2f GB/s (%.2f)\n",
                  mb / queued_s / 1e9, down_s / queued_s);
    else
      std::printf("the copy stream failed\n");
  } else {
    std::printf("no copy stream: %s\n", stream.error().c_str());
  }
  return mb / down_s;
#else
  (void)bytes;
  (void)block_bytes;
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::use_best_openblas_kernels(argv);
  std::filesystem::path l3_dir = "tier_bench_l3";
  std::string kind = "cpu";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--l3-dir") == 0) l3_dir = argv[++i];
    if (std::strcmp(argv[i], "--device") == 0) kind = argv[++i];
  }
  if (kind != "cpu" && kind != "cuda") {
    std::printf("--device must be cpu or cuda, got '%s'\n", kind.c_str());
    return 2;
  }
  omp_set_num_threads(kThreads);
  const auto config = ModelConfig::gpt2_124m();
  std::printf("building GPT-2 124M-shaped random weights...\n");
  Gpt2Model model(config, ModelWeights::random(config, 1));
  const std::size_t block_bytes = model.kv_layout(kPage).block_bytes();

  // ---- time to first token by tier -------------------------------------
  std::filesystem::remove_all(l3_dir);
  SchedulerConfig c = ttft_scheduler_config(kPage);
  c.cache.l2_bytes = 160 * block_bytes;
  c.cache.l3_path = (l3_dir / "store").string();
  c.cache.l3_bytes = 320 * block_bytes;
  auto made = make_scheduler(model, c, kind);
  if (!made) return 1;
  Scheduler& s = *made->scheduler;
  for (const std::string& w : s.cache()->warnings()) std::printf("note: %s\n", w.c_str());
  s.calibrate_tier_costs();
  const TierCosts costs = s.cache()->stats().costs;
  std::printf("\n== kvtier tiers, GPT-2 124M shapes, block %zu bytes, %d threads, device %s\n",
              block_bytes, kThreads, made->device.name.c_str());
  std::printf("calibrated: prefill %s; L2 copy %.1f us/block; L3 read %.1f us + %.1f us/block\n",
              prefill_curve_text(costs.prefill).c_str(), costs.load[Tier::kL2].per_block_s * 1e6,
              costs.load[Tier::kL3].latency_s * 1e6, costs.load[Tier::kL3].per_block_s * 1e6);
  // The decision is printed, not applied: this table measures every tier.
  s.cache()->cost_model().pin({});

  const std::vector<int> prompt = random_tokens(1024, config.vocab_size, 11);
  // Warm: 1009 tokens leave 63 full blocks (1008 tokens) in the cache.
  (void)s.submit(ttft_request({prompt.begin(), prompt.begin() + 1009}, 1));
  run_all(s);
  s.cache()->drain();

  constexpr int kReps = 3;
  // A row per tier this bench holds the prefix in (L1 to L3, fastest
  // first), then cold.
  constexpr int kHeld = static_cast<int>(Tier::kL3) + 1, kCold = kHeld;
  std::array<double, kHeld + 1> best;
  std::array<int, kHeld + 1> first;
  best.fill(1e9);
  first.fill(-1);
  for (int rep = 0; rep < kReps; ++rep) {
    // Each request is timed alone: the transfers the previous one left
    // (write-through of a cold prompt's 64 blocks, demotions) finish first,
    // or their checksums and copies would share the cores with the forward.
    // The prefix comes up to L1 with each hit: the tiers above the one
    // measured are flushed down first.
    for (int held = 0; held <= kCold; ++held) {
      s.cache()->drain();
      for (int above = 0; above < held && held < kCold; ++above)
        s.cache()->flush(static_cast<Tier>(above));
      s.cache()->drain();
      const auto [ttft, token] = time_to_first_token(
          s, held < kCold ? ttft_request(prompt, 1)
                          : ttft_request(prompt, 1, "cold-" + std::to_string(rep)));
      best[held] = std::min(best[held], ttft);
      first[held] = token;
    }
  }
  std::printf("\ntime to first token, 1024-token prompt, 1008 cached (best of %d):\n", kReps);
  std::printf("  %-8s %10s %12s\n", "prefix", "TTFT ms", "vs cold");
  for (int i = 0; i <= kCold; ++i) {
    const std::string name = i < kCold ? std::string(label(static_cast<Tier>(i))) + " hit" : "cold";
    std::printf("  %-8s %10.1f %11.1fx\n", name.c_str(), best[i] * 1e3, best[kCold] / best[i]);
  }
  std::printf(
      "  first token identical in all four: %s\n",
      std::all_of(first.begin(), first.end(), [&](int t) { return t == first[0]; }) ? "yes" : "NO");
  std::printf("  ratio L2 hit (cold / L2): %.1f  (target >= 20)\n", best[kCold] / best[1]);
  std::printf("  ratio L3 hit (cold / L3): %.1f  (target >= 10)\n", best[kCold] / best[2]);

  // ---- the same with other lower-tier settings, each on a store of its own:
  // L3 blocks moved whole (load_by_layer off: the prefill starts once all
  // are in L1; from L2 into a host L1 blocks always come up whole), and int8
  // lower tiers (lossy; l2_format = l3_format = int8).
  struct Variant {
    const char* name;
    SchedulerConfig config;
    bool with_l2;
  };
  SchedulerConfig whole = c, int8 = c;
  whole.cache.load_by_layer = false;
  whole.cache.l3_path = (l3_dir / "store-whole").string();
  int8.cache.l2_format = KvFormat::kInt8;
  int8.cache.l3_format = KvFormat::kInt8;
  int8.cache.l3_path = (l3_dir / "store-int8").string();
  std::printf("other lower-tier settings:\n");
  // On a GPU an exact L2 moves by layer too (the copy stream's), so whole
  // is measured from L2 as well.
  for (const Variant& v : {Variant{"whole", whole, kind != "cpu"}, Variant{"int8", int8, true}}) {
    auto vs = make_scheduler(model, v.config, kind);
    if (!vs) return 1;
    Scheduler& sv = *vs->scheduler;
    (void)sv.submit(ttft_request({prompt.begin(), prompt.begin() + 1009}, 1));
    run_all(sv);
    sv.cache()->drain();
    double best_v[2] = {1e9, 1e9};
    int first_v[2] = {-1, -1};
    for (int rep = 0; rep < kReps; ++rep) {
      if (v.with_l2) {
        sv.cache()->drain();
        sv.cache()->flush(Tier::kL1);
        sv.cache()->drain();
        auto [l2, t2] = time_to_first_token(sv, ttft_request(prompt, 1));
        best_v[0] = std::min(best_v[0], l2);
        first_v[0] = t2;
        sv.cache()->drain();
      }
      sv.cache()->flush(Tier::kL1);
      sv.cache()->flush(Tier::kL2);
      sv.cache()->drain();
      auto [l3, t3] = time_to_first_token(sv, ttft_request(prompt, 1));
      best_v[1] = std::min(best_v[1], l3);
      first_v[1] = t3;
    }
    if (v.config.cache.l3_format == KvFormat::kInt8)
      std::printf("  (int8 stores a block of %zu bytes as %zu; lossy)\n", block_bytes,
                  sv.cache()->stats().tier[2].block_bytes);
    for (int i = v.with_l2 ? 0 : 1; i < 2; ++i) {
      const std::string name = std::string(i == 0 ? "L2 " : "L3 ") + v.name;
      std::printf("  %-8s %10.1f %11.1fx   first token as exact: %s\n", name.c_str(),
                  best_v[i] * 1e3, best[3] / best_v[i], first_v[i] == first[3] ? "yes" : "no");
    }
  }

  // ---- L1 <-> L2 copy bandwidth ----------------------------------------
  // Demote the cached blocks to L2 and time it, against a plain copy.
  run_all(s);
  (void)s.submit(ttft_request(prompt, 1));
  run_all(s);  // prefix back in L1
  s.cache()->flush(Tier::kL2);
  const long before = s.cache()->stats().tier[1].demotions;
  const auto start = Clock::now();
  s.cache()->flush(Tier::kL1);
  const double demote_s = seconds_since(start);
  const long moved = s.cache()->stats().tier[1].demotions - before;
  const double demote_bw = static_cast<double>(moved) * static_cast<double>(block_bytes) / demote_s;
  // The tier's transfer latencies include the wait in the copy worker's
  // queue (promotions are queued a prefix at a time), so the bandwidth is
  // the demotion's: one block copy after another, bookkeeping included.
  const util::LatencySummary copy = s.cache()->stats().tier[1].transfer;
  std::printf(
      "\nL1 -> L2 demotion of %ld blocks: %.2f GB/s; L2 transfer latency (queueing included) "
      "mean %.1f us, p99 %.1f us\n",
      moved, demote_bw / 1e9, copy.mean_us, copy.p99_us);
  const double baseline_bw = baseline_copy_bytes_per_second(
      kind, static_cast<std::size_t>(moved) * block_bytes, block_bytes);
  std::printf("ratio block copy / plain copy: %.2f  (target >= 0.8)\n", demote_bw / baseline_bw);
  made.reset();
  std::filesystem::remove_all(l3_dir);

  // ---- swap vs recompute -------------------------------------------------
  // Six 192-token prompts each generating 96 tokens grow to 6 x 18 pages;
  // the budget holds 48, so running requests are preempted as they grow.
  // The prompts are long enough that recomputing a victim costs what it
  // costs in practice: a prefill of its whole context.
  std::vector<RequestParams> work;
  for (int i = 0; i < 6; ++i)
    work.push_back(ttft_request(random_tokens(192, config.vocab_size, 100 + i), 96));
  // Twice each, alternating, best time kept: one run of each on a noisy
  // machine can swap their order.
  constexpr int kWorkloadReps = 2;
  std::vector<std::vector<int>> outputs[2];
  double best_s[2] = {1e9, 1e9};
  SchedulerStats stats[2];
  long generated[2] = {0, 0};
  for (int rep = 0; rep < kWorkloadReps; ++rep) {
    for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
      const int m = mode == PreemptionMode::kSwap ? 0 : 1;
      SchedulerConfig w;
      w.prefix_cache = mode == PreemptionMode::kSwap;
      w.preemption = mode;
      w.page_size = kPage;
      w.max_kv_tokens = 768;
      w.max_batch_size = 6;
      w.token_budget = 256;
      if (w.prefix_cache) w.cache.l2_bytes = 160 * block_bytes;
      auto made_w = make_scheduler(model, w, kind);
      if (!made_w) return 1;
      Scheduler* ws = made_w->scheduler.get();
      std::vector<RequestId> ids;
      const auto t0 = Clock::now();
      for (const RequestParams& p : work) ids.push_back(*ws->submit(p));
      run_all(*ws);
      best_s[m] = std::min(best_s[m], seconds_since(t0));
      outputs[m].clear();
      generated[m] = 0;
      for (RequestId id : ids) {
        const Request* r = ws->find(id);
        generated[m] += r->num_generated();
        outputs[m].emplace_back(r->generated().begin(), r->generated().end());
      }
      stats[m] = ws->stats();
    }
  }
  std::printf(
      "\npreemption workload: 6 x (192 prompt + 96 generated), max_kv_tokens 768 (best of %d)\n",
      kWorkloadReps);
  std::printf("  %-10s %12s %12s %12s %10s\n", "mode", "preemptions", "recomputed", "seconds",
              "tok/s");
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    const int m = mode == PreemptionMode::kSwap ? 0 : 1;
    std::printf("  %-10s %12ld %12ld %12.2f %10.1f\n", std::string(to_string(mode)).c_str(),
                stats[m].preemptions, stats[m].recomputed_tokens, best_s[m],
                static_cast<double>(generated[m]) / best_s[m]);
  }
  std::printf("  outputs identical between modes: %s\n", outputs[0] == outputs[1] ? "yes" : "NO");
  std::printf("  ratio swap / recompute tok/s: %.2f  (target > 1)\n",
              (static_cast<double>(generated[0]) / best_s[0]) /
                  (static_cast<double>(generated[1]) / best_s[1]));
  return 0;
}

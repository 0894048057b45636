// Forward-pass speed on GPT-2 124M shapes (random weights from a seed),
// with the machine's own limits measured in the same run:
//   decode batch 1: weight bytes read per token x tokens/s / memcpy bandwidth
//   cached tail:    16 tokens after a cached 1008 (the floor of a cached TTFT)
//   shared prompt:  decode of 4 and 16 rows behind one 1016-token prompt
//                   whose pages they share, against rows with contexts of
//                   their own
//   prefill 1024:   achieved GFLOP/s / OpenBLAS sgemm GFLOP/s on the same shapes,
//                   also as the median of rounds alternating the two
// and peak resident memory against weights, their packed copy and KV. Built with the CUDA side, it
// then runs the same steps through the GPU forward (engine/device.h's cuda)
// when a device is present, against the CPU figures of the same run.
// Prints figures; asserts nothing.
//
//   build/bench/engine_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/machine_peaks.h"
#include "bench/prefill_timing.h"
#include "bench/recording_reporter.h"
#include "engine/device.h"
#include "engine/model/gpt2/gpt2_model.h"

namespace {

using kvtier::bench::best_seconds;
using kvtier::bench::random_tokens;

using kvtier::Gpt2Model;
using kvtier::Model;
using kvtier::SequenceKv;

constexpr int kThreads = 2;
constexpr int kPage = 16;
// Rounds of the paired prefill 1024 / OpenBLAS measurement.
constexpr int kPairedRounds = 5;
constexpr int kMaxBatch = 16;
// Decode batches, each with its own context and behind one shared prompt:
// the rows llama-bench and llama-batched-bench (-pps) have twins of.
constexpr int kDecodeBatches[] = {1, 4, 8, 16};
constexpr int kSharedDecodeBatches[] = {4, 16};

struct Bench {
  Gpt2Model& model;
  kvtier::tiers::BlockPool& pool;

  // One prefill of T tokens, timed by hand: the forward alone, not the
  // sequence's set-up and release. The paired OpenBLAS rounds time the same.
  // One untimed prefill first, as llama-bench's warm-up run: prefill 128 is
  // the run's first forward, and without it the first of three repetitions
  // (--benchmark_repetitions=3) took 1.33-1.44x the time of the other two
  // (first touches of the pool and the forward's buffers, most likely).
  void prefill(benchmark::State& state, int T) {
    (void)prefill_seconds(T);
    for (auto _ : state) state.SetIterationTime(prefill_seconds(T));
    state.counters["tok/s"] = benchmark::Counter(T, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/s"] =
        benchmark::Counter(kvtier::bench::gpt2_prefill_flops(model.config(), T) / 1e9,
                           benchmark::Counter::kIsIterationInvariantRate);
  }

  // Seconds of one prefill of T tokens (the forward alone).
  double prefill_seconds(int T) { return kvtier::bench::prefill_seconds(model, pool, T, kPage); }

  // The step a cached prefix leaves to compute: `tail` tokens after a
  // `context`-token prefix whose KV is already in the pool (a prefix-cache
  // hit). Its cost is the floor of a cached TTFT. Each iteration gets fresh
  // copies of the prefix's blocks (untimed).
  void cached_tail(benchmark::State& state, int context, int tail) {
    const auto tokens = random_tokens(context + tail, model.config().vocab_size, 5);
    SequenceKv prefix(kPage);
    prefix.reserve(pool, context);
    const Model::Chunk warm{&prefix, std::span(tokens).first(context), false};
    (void)model.forward(std::span(&warm, 1), pool);
    for (auto _ : state) {
      state.PauseTiming();
      std::vector<int> blocks;
      for (int b : prefix.block_ids()) {
        blocks.push_back(*pool.allocate());
        std::memcpy(pool.data(blocks.back()), pool.data(b), pool.block_bytes());
      }
      SequenceKv kv = SequenceKv::adopt(kPage, std::move(blocks), context);
      kv.reserve(pool, context + tail);
      state.ResumeTiming();
      const Model::Chunk chunk{&kv, std::span(tokens).subspan(context, tail), false};
      auto logits = model.forward(std::span(&chunk, 1), pool);
      benchmark::DoNotOptimize(logits->data());
      state.PauseTiming();
      kv.release(pool);
      state.ResumeTiming();
    }
    prefix.release(pool);
  }

  // B sequences holding `context` tokens each; one iteration is one decode
  // step for all of them. The first sequence is prefilled and its pages
  // copied to the others: decode cost does not depend on what the keys say.
  void decode(benchmark::State& state, int B, int context) {
    const int V = model.config().vocab_size;
    const auto prompt = random_tokens(context, V, 7);
    const int steps = static_cast<int>(state.max_iterations);
    std::vector<SequenceKv> seqs(B, SequenceKv(kPage));
    for (auto& s : seqs) s.reserve(pool, context + steps);
    const Model::Chunk first{&seqs[0], prompt, false};
    (void)model.forward(std::span(&first, 1), pool);
    for (int s = 1; s < B; ++s) {
      for (std::size_t b = 0; b < seqs[0].block_ids().size(); ++b)
        std::memcpy(pool.data(seqs[s].block_ids()[b]), pool.data(seqs[0].block_ids()[b]),
                    pool.block_bytes());
      seqs[s].advance(context);
    }
    decode_steps(state, seqs);
  }

  // B sequences behind one shared `context`-token prompt, as the prefix
  // cache shares it: its pages are the same blocks for every row (forks of
  // the prefilled one), each row's own from the partial last page on (copy
  // on write). One iteration is one decode step for all of them; the peer's
  // twin is llama-batched-bench with its prompt shared (-pps).
  void decode_shared(benchmark::State& state, int B, int context) {
    const int V = model.config().vocab_size;
    const auto prompt = random_tokens(context, V, 7);
    const int steps = static_cast<int>(state.max_iterations);
    std::vector<SequenceKv> seqs;
    seqs.emplace_back(kPage);
    seqs[0].reserve(pool, context);
    const Model::Chunk first{&seqs[0], prompt, false};
    (void)model.forward(std::span(&first, 1), pool);
    for (int s = 1; s < B; ++s) seqs.push_back(seqs[0].fork(pool));
    for (auto& s : seqs) s.reserve(pool, context + steps);
    decode_steps(state, seqs);
  }

  // The timed part of both: one decode step of every sequence an iteration,
  // then their blocks back to the pool.
  void decode_steps(benchmark::State& state, std::vector<SequenceKv>& seqs) {
    const int B = static_cast<int>(seqs.size());
    std::vector<int> next(B, 1);
    std::vector<Model::Chunk> batch;
    for (int s = 0; s < B; ++s) batch.push_back({&seqs[s], std::span(&next[s], 1), false});
    for (auto _ : state) {
      auto logits = model.forward(batch, pool);
      benchmark::DoNotOptimize(logits->data());
    }
    for (auto& s : seqs) s.release(pool);
    state.counters["tok/s"] = benchmark::Counter(B, benchmark::Counter::kIsIterationInvariantRate);
  }
};

#if defined(KVTIER_HAVE_CUDA)
// The CPU figures the GPU's are set against.
struct CpuFigures {
  double prefill1024_ms, tail_ms, decode1_tok_s;
};

void gpu_figures(const Gpt2Model& model, const CpuFigures& cpu) {
  const auto& config = model.config();
  const int V = config.vocab_size, ctx = config.block_size;
  constexpr int kGpuBatch = 64;
  // L1 for kGpuBatch + 1 sequences of a whole context each.
  kvtier::SchedulerConfig l1;
  l1.page_size = kPage;
  l1.max_kv_tokens = (kGpuBatch + 1) * (ctx / kPage + 1) * kPage;
  auto device = kvtier::open_device(model, l1, {.kind = "cuda"});
  if (!device) {
    std::printf("\nGPU forward: %s; GPU figures skipped\n", device.error().c_str());
    return;
  }
  kvtier::tiers::BlockPool& pool = *device->l1;
  const std::size_t block_bytes = pool.block_bytes();
  auto run = [&](std::span<const Model::Chunk> batch) {
    auto logits = device->forward.run(batch, pool, {});
    if (!logits) std::printf("GPU forward failed: %s\n", logits.error().c_str());
  };
  auto copy_blocks = [&](const SequenceKv& from, const SequenceKv& to) {
    for (std::size_t b = 0; b < from.block_ids().size() && b < to.block_ids().size(); ++b)
      pool.copy(pool.data(to.block_ids()[b]), pool.data(from.block_ids()[b]), block_bytes);
  };
  std::printf("\n== GPU forward (%s), GPT-2 124M shapes; weights %.0f MB on the device\n",
              device->name.c_str(), device->weight_bytes / 1e6);

  const auto tokens = random_tokens(ctx, V, 5);
  double prefill1024_s = 0;
  for (int T : {128, 512, 1024}) {
    const double s = best_seconds(3, [&] {
      SequenceKv kv(kPage);
      kv.reserve(pool, T);
      const Model::Chunk chunk{&kv, std::span(tokens).first(T), false};
      run(std::span(&chunk, 1));
      kv.release(pool);
    });
    if (T == 1024) prefill1024_s = s;
    std::printf("prefill %4d: %9.1f tok/s  %7.1f GFLOP/s  %7.2f ms\n", T, T / s,
                kvtier::bench::gpt2_prefill_flops(config, T) / s / 1e9, s * 1e3);
  }
  std::printf("  prefill 1024 vs the CPU's in this run (%.1f ms): %.1fx\n", cpu.prefill1024_ms,
              cpu.prefill1024_ms / (prefill1024_s * 1e3));

  // The cached tail: 16 tokens after 1008 whose KV is already on the device.
  {
    SequenceKv prefix(kPage);
    prefix.reserve(pool, 1008);
    const Model::Chunk warm{&prefix, std::span(tokens).first(1008), false};
    run(std::span(&warm, 1));
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      SequenceKv kv(kPage);
      kv.reserve(pool, 1024);
      copy_blocks(prefix, kv);
      kv.advance(1008);
      best = std::min(best, best_seconds(1, [&] {
                        const Model::Chunk chunk{&kv, std::span(tokens).subspan(1008, 16), false};
                        run(std::span(&chunk, 1));
                      }));
      kv.release(pool);
    }
    prefix.release(pool);
    std::printf(
        "cached tail: 16 tokens after a cached 1008: %.2f ms (GPU cold 1024: %.2f ms, %.1fx; "
        "CPU tail %.1f ms)\n",
        best * 1e3, prefill1024_s * 1e3, prefill1024_s / best, cpu.tail_ms);
  }

  // Decode steps at context 1016..1023 for B sequences.
  for (int B : {1, 8, 16, kGpuBatch}) {
    const int steps = 8, start = ctx - steps;
    std::vector<SequenceKv> seqs(B, SequenceKv(kPage));
    for (auto& s : seqs) s.reserve(pool, ctx);
    const Model::Chunk first{&seqs[0], std::span(tokens).first(start), false};
    run(std::span(&first, 1));
    for (int s = 1; s < B; ++s) {
      copy_blocks(seqs[0], seqs[s]);
      seqs[s].advance(start);
    }
    std::vector<int> next(B, 1);
    std::vector<Model::Chunk> batch;
    for (int s = 0; s < B; ++s) batch.push_back({&seqs[s], std::span(&next[s], 1), false});
    const double seconds = best_seconds(1, [&] {
      for (int i = 0; i < steps; ++i) run(batch);
    });
    const double tok_s = B * steps / seconds;
    std::printf("decode batch %2d ctx %d: %9.1f tok/s  (%.2f ms a step)", B, ctx, tok_s,
                1e3 * seconds / steps);
    if (B == 1)
      std::printf("  %.1fx the CPU's %.1f tok/s", tok_s / cpu.decode1_tok_s, cpu.decode1_tok_s);
    std::printf("\n");
    for (auto& s : seqs) s.release(pool);
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::use_best_openblas_kernels(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  omp_set_num_threads(kThreads);
  const auto config = kvtier::ModelConfig::gpt2_124m();
  std::printf("building GPT-2 124M-shaped random weights...\n");
  Gpt2Model model(config, kvtier::ModelWeights::random(config, 1));
  const auto layout = model.kv_layout(kPage);
  const int blocks_per_seq = config.block_size / kPage + 1;
  kvtier::tiers::BlockPool pool(layout.block_bytes(), kMaxBatch * blocks_per_seq + blocks_per_seq);
  Bench bench{model, pool};

  for (int T : {128, 512, 1024})
    benchmark::RegisterBenchmark(("prefill/" + std::to_string(T)).c_str(),
                                 [&bench, T](benchmark::State& s) { bench.prefill(s, T); })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3)
        ->UseManualTime();
  benchmark::RegisterBenchmark("cached_tail/16after1008",
                               [&bench](benchmark::State& s) { bench.cached_tail(s, 1008, 16); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(5)
      ->UseRealTime();
  for (int context : {128, 1024})
    for (int B : kDecodeBatches) {
      // Positions stop at block_size: a 1024 context decodes its last 8.
      const int steps = 8;
      const int start = context == config.block_size ? context - steps : context;
      benchmark::RegisterBenchmark(
          ("decode/batch" + std::to_string(B) + "/ctx" + std::to_string(context)).c_str(),
          [&bench, B, start](benchmark::State& s) { bench.decode(s, B, start); })
          ->Unit(benchmark::kMillisecond)
          ->Iterations(steps)
          ->UseRealTime();
    }
  // Rows behind one shared 1016-token prompt (its last 8 positions decoded).
  for (int B : kSharedDecodeBatches)
    benchmark::RegisterBenchmark(
        ("decode_shared/batch" + std::to_string(B) + "/ctx1016").c_str(),
        [&bench, B](benchmark::State& s) { bench.decode_shared(s, B, 1016); })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(8)
        ->UseRealTime();

  kvtier::bench::RecordingReporter capture;
  benchmark::RunSpecifiedBenchmarks(&capture);
  const double rss = kvtier::bench::peak_rss_bytes();

  // The machine's limits, in the same run.
  const double memcpy_bw = std::max(kvtier::bench::memcpy_bytes_per_second(1),
                                    kvtier::bench::memcpy_bytes_per_second(kThreads));
  const double read_bw = kvtier::bench::read_bytes_per_second(kThreads);
  const int C = config.n_embd;
  struct Shape {
    int K, N;
  };
  auto openblas_gflops = [&] {
    double blas_seconds = 0.0, blas_flops = 0.0;
    for (Shape s : {Shape{C, 3 * C}, Shape{C, C}, Shape{C, 4 * C}, Shape{4 * C, C}}) {
      const double flops = 2.0 * 1024 * s.K * s.N;
      blas_seconds +=
          flops / kvtier::bench::openblas_sgemm_flops(
                      1024, s.K, s.N, config.weight_layout == kvtier::kernels::WeightLayout::kOutIn,
                      kThreads);
      blas_flops += flops;
    }
    return blas_flops / blas_seconds / 1e9;
  };
  const double blas_gflops = openblas_gflops();
  const double prefill1024 = capture.get("prefill/1024/iterations:3/manual_time", "GFLOP/s");
  // The prefill 1024 ratio from rounds that alternate one forward with
  // OpenBLAS on the same shapes, so that both see the same machine (on a
  // shared VM either may lose 30% for a few seconds); the median round counts.
  // Skipped when a filter left prefill 1024 out.
  std::vector<double> paired;
  if (prefill1024 > 0.0)
    for (int round = 0; round < kPairedRounds; ++round) {
      const double ours =
          kvtier::bench::gpt2_prefill_flops(config, 1024) / bench.prefill_seconds(1024) / 1e9;
      paired.push_back(ours / openblas_gflops());
    }
  std::ranges::sort(paired);

  const double weights = static_cast<double>(model.weights().parameter_bytes());
  // A decode step reads every weight once, but only one row of wpe.
  const double read_per_token = weights - 4.0 * config.block_size * C + 4.0 * C;
  const double decode1 = capture.get("decode/batch1/ctx128/iterations:8/real_time", "tok/s");

  std::printf("\n== kvtier engine, GPT-2 124M shapes, %d threads\n", kThreads);
  std::printf("memcpy bandwidth (best of 1 and %d threads): %.2f GB/s\n", kThreads,
              memcpy_bw / 1e9);
  std::printf("read bandwidth (%d threads): %.2f GB/s\n", kThreads, read_bw / 1e9);
  std::printf("OpenBLAS (%s kernels) sgemm, M=1024 on the 4 linear shapes: %.1f GFLOP/s\n",
              kvtier::bench::openblas_core(), blas_gflops);
  for (int T : {128, 512, 1024}) {
    const std::string name = "prefill/" + std::to_string(T) + "/iterations:3/manual_time";
    std::printf("prefill %4d: %8.1f tok/s  %6.1f GFLOP/s\n", T, capture.get(name, "tok/s"),
                capture.get(name, "GFLOP/s"));
  }
  for (int context : {128, 1024})
    for (int B : kDecodeBatches) {
      const std::string name = "decode/batch" + std::to_string(B) + "/ctx" +
                               std::to_string(context) + "/iterations:8/real_time";
      std::printf("decode batch %2d ctx %4d: %8.1f tok/s\n", B, context,
                  capture.get(name, "tok/s"));
    }
  for (int B : kSharedDecodeBatches) {
    const std::string name =
        "decode_shared/batch" + std::to_string(B) + "/ctx1016/iterations:8/real_time";
    const std::string own = "decode/batch" + std::to_string(B) + "/ctx1024/iterations:8/real_time";
    std::printf(
        "decode batch %2d behind a shared 1016-token prompt: %8.1f tok/s (%.2fx own contexts)\n", B,
        capture.get(name, "tok/s"), capture.get(name, "tok/s") / capture.get(own, "tok/s"));
  }
  {
    // What a cached TTFT cannot go below on this machine: the tail's step.
    const double tail_s = capture.get("cached_tail/16after1008/iterations:5/real_time", "seconds");
    const double cold_s = 1024 / capture.get("prefill/1024/iterations:3/manual_time", "tok/s");
    std::printf(
        "cached tail: 16 tokens after a cached 1008: %.1f ms (cold 1024: %.1f ms, %.1fx); "
        "reading the weights once takes %.1f ms\n",
        tail_s * 1e3, cold_s * 1e3, cold_s / tail_s, 1e3 * weights / memcpy_bw);
  }
  std::printf("ratio decode batch 1 (weight bytes x tok/s / memcpy): %.2f  (target >= 0.7)\n",
              read_per_token * decode1 / memcpy_bw);
  std::printf("  the same against read bandwidth:                    %.2f\n",
              read_per_token * decode1 / read_bw);
  std::printf("ratio prefill 1024 (GFLOP/s / OpenBLAS GFLOP/s):     %.2f  (target >= 0.75)\n",
              prefill1024 / blas_gflops);
  if (!paired.empty()) {
    std::printf("  the same in %d rounds alternating one forward with OpenBLAS:", kPairedRounds);
    for (double r : paired) std::printf(" %.2f", r);
    std::printf("; median %.2f\n", paired[paired.size() / 2]);
  }
  const double kv_bytes = static_cast<double>(kMaxBatch) * (config.block_size) *
                          static_cast<double>(layout.bytes_per_token());
  const double packed = static_cast<double>(model.packed_bytes());
  std::printf(
      "peak RSS %.0f MB; weights %.0f MB + their packed copy %.0f MB + largest KV in use %.0f MB "
      "= %.0f MB (%.1f%%)\n",
      rss / 1e6, weights / 1e6, packed / 1e6, kv_bytes / 1e6, (weights + packed + kv_bytes) / 1e6,
      100.0 * rss / (weights + packed + kv_bytes));
#if defined(KVTIER_HAVE_CUDA)
  gpu_figures(model,
              {1e3 * 1024 / capture.get("prefill/1024/iterations:3/manual_time", "tok/s"),
               1e3 * capture.get("cached_tail/16after1008/iterations:5/real_time", "seconds"),
               capture.get("decode/batch1/ctx1024/iterations:8/real_time", "tok/s")});
#endif
  return 0;
}

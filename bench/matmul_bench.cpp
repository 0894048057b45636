// Benchmarks kernels/matmul.cpp against OpenBLAS sgemm on the GPT-2 124M
// shapes (C = 768, V = 50257), both weight layouts, M = 1, 16 (decode) and
// 128, 1024 (prefill), 2 threads each; plus memory bandwidth for reference.
//
// Decode (M <= 16) is memory-bound, so those runs cycle through copies of the
// weight spread over a pool larger than the L3 (260 MiB here): each call
// streams its weight from DRAM as in a real decode step, where the whole model
// (~500 MB) passes through the cache. Prefill runs reuse one hot copy.
//
// Counters: GFLOP/s (2*M*K*N per call) and, for decode, weight GB/s (4*K*N
// bytes per call). At the end a table prints ours / OpenBLAS per shape.
// Nothing is asserted.
//
// Debian's OpenBLAS 0.3.21 does not recognise Sapphire/Emerald Rapids and
// falls back to its SSE3 "Prescott" kernels (~1/4 of its real speed). Unless
// OPENBLAS_CORETYPE is set, the benchmark re-executes itself with
// OPENBLAS_CORETYPE=SkylakeX on AVX-512 machines (bench/machine_peaks.h), so
// the comparison is with OpenBLAS's AVX-512 sgemm.
//
// On a shared machine (more runnable threads than cores), run with
// OMP_WAIT_POLICY=passive: libgomp's default spin-wait then makes each short
// parallel region wait a scheduler slice (~10 ms) for a preempted worker.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/machine_peaks.h"
#include "bench/recording_reporter.h"
#include "kernels/matmul.h"

namespace {

using kvtier::kernels::WeightLayout;

constexpr int kThreads = 2;
constexpr std::size_t kPoolFloats = std::size_t{160} << 20;  // 640 MiB, > L3

// One big random buffer shared by all benchmarks (allocated on first use).
std::vector<float>& pool() {
  static std::vector<float> p = [] {
    std::vector<float> v(kPoolFloats);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 2001) - 1000) * 1e-3f;
    return v;
  }();
  return p;
}

struct Shape {
  const char* name;
  int K, N;
};
constexpr Shape kShapes[] = {{"qkv", 768, 2304},
                             {"attn_proj", 768, 768},
                             {"fc", 768, 3072},
                             {"mlp_proj", 3072, 768},
                             {"lm_head", 768, 50257}};

enum class Impl { kOurs, kOpenBlas };

void run_matmul(benchmark::State& state, Impl impl, Shape shape, int M, WeightLayout layout) {
  const int K = shape.K, N = shape.N;
  const std::size_t wsize = std::size_t(K) * N;
  // Decode: one weight copy per call, cycling through the pool; prefill: one copy.
  const std::size_t copies = M <= 16 ? std::max<std::size_t>(1, kPoolFloats / wsize) : 1;
  const float* weights = pool().data();
  // Ours reads packed weights (kernels/matmul.h), packed here, untimed, one
  // per copy: as much memory again as the pool, for the run's length.
  std::vector<kvtier::kernels::PackedWeight> packed;
  if (impl == Impl::kOurs)
    for (std::size_t c = 0; c < copies; ++c)
      packed.push_back(kvtier::kernels::PackedWeight::pack(weights + c * wsize, K, N, layout));
  std::vector<float> inp(std::size_t(M) * K), out(std::size_t(M) * N), bias(N, 0.5f);
  for (std::size_t i = 0; i < inp.size(); ++i) inp[i] = float(int(i % 7) - 3) * 0.25f;
  omp_set_num_threads(kThreads);
  openblas_set_num_threads(kThreads);
  std::size_t copy = 0;
  for (auto _ : state) {
    const std::size_t c = copy;
    copy = copy + 1 == copies ? 0 : copy + 1;
    const float* w = weights + c * wsize;
    if (impl == Impl::kOurs) {
      kvtier::kernels::matmul(out.data(), inp.data(), packed[c], bias.data(), M);
    } else {
      // out = inp (M,K) x W^T (kOutIn, W is (N,K)) or inp x W (kInOut, (K,N)).
      // (OpenBLAS gets no bias add; it is a negligible M*N pass.)
      const bool trans = layout == WeightLayout::kOutIn;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, trans ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                  inp.data(), K, w, trans ? K : N, 0.0f, out.data(), N);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * M * K * N;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (M <= 16) {
    state.counters["weight_GB/s"] =
        benchmark::Counter(wsize * 4.0 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
}

std::string run_name(const char* impl, const Shape& s, int M, WeightLayout layout) {
  return std::string(impl) + "/" + s.name + "/M:" + std::to_string(M) +
         (layout == WeightLayout::kOutIn ? "/kOutIn" : "/kInOut");
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::use_best_openblas_kernels(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  struct Case {
    Shape shape;
    int M;
    WeightLayout layout;
  };
  std::vector<Case> cases;
  for (int M : {1, 16, 128, 1024}) {
    for (const Shape& s : kShapes) {
      const bool lm_head = std::string(s.name) == "lm_head";
      for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
        if (lm_head && layout == WeightLayout::kInOut) continue;  // always (V, C)
        cases.push_back({s, M, layout});
      }
    }
  }
  for (const Case& c : cases) {
    for (Impl impl : {Impl::kOurs, Impl::kOpenBlas}) {
      const char* tag = impl == Impl::kOurs ? "ours" : "openblas";
      benchmark::RegisterBenchmark(run_name(tag, c.shape, c.M, c.layout).c_str(), run_matmul, impl,
                                   c.shape, c.M, c.layout)
          ->UseRealTime();
    }
  }

  kvtier::bench::RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("\nOpenBLAS core: %s (OPENBLAS_CORETYPE=%s), %d threads each\n",
              kvtier::bench::openblas_core(), coretype ? coretype : "unset", kThreads);
  std::printf("memcpy (%d threads) %.1f GB/s, read (%d threads) %.1f GB/s\n", kThreads,
              kvtier::bench::memcpy_bytes_per_second(kThreads) * 1e-9, kThreads,
              kvtier::bench::read_bytes_per_second(kThreads) * 1e-9);
  std::printf("%-40s %10s %10s %7s %10s\n", "case", "ours", "openblas", "ratio", "ours GB/s");
  for (const Case& c : cases) {
    const std::string ours = run_name("ours", c.shape, c.M, c.layout) + "/real_time";
    const std::string blas = run_name("openblas", c.shape, c.M, c.layout) + "/real_time";
    const double a = reporter.get(ours, "GFLOP/s"), b = reporter.get(blas, "GFLOP/s");
    if (a == 0.0 || b == 0.0) continue;  // filtered out
    std::printf("%-40s %10.1f %10.1f %7.2f", run_name("", c.shape, c.M, c.layout).c_str() + 1, a, b,
                a / b);
    if (c.M <= 16) std::printf(" %10.1f", reporter.get(ours, "weight_GB/s"));
    std::printf("\n");
  }
  benchmark::Shutdown();
  return 0;
}

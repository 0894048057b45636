#include "bench/machine_peaks.h"

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "tiers/block_pool.h"

namespace kvtier::bench {
namespace {

constexpr std::size_t kBytes = std::size_t{512} << 20;  // twice the 260 MiB L3 here

// kBytes of memory allocated the way the tiers allocate their pools (huge
// pages where the kernel has them: tiers/block_pool.h), filled, so that
// neither page faults nor small pages' TLB misses are timed: what the memory
// can do, the fair reference for a pool's block copies.
std::unique_ptr<tiers::BlockPool> filled(std::uint8_t value) {
  auto pool = std::make_unique<tiers::BlockPool>(kBytes, 1);
  std::memset(pool->data(0), value, kBytes);
  return pool;
}

}  // namespace

void use_best_openblas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr &&
      std::strcmp(openblas_get_corename(), "Prescott") == 0 && __builtin_cpu_supports("avx512f")) {
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: go on with Prescott
  }
}

const char* openblas_core() { return openblas_get_corename(); }

double memcpy_bytes_per_second(int threads, int repeats) {
  const auto src = filled(1), dst = filled(2);
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const std::size_t per = kBytes / omp_get_num_threads();
      const std::size_t begin = per * omp_get_thread_num();
      std::memcpy(dst->data(0) + begin, src->data(0) + begin, per);
    }
    best = std::max(best, kBytes / seconds_since(start));
  }
  return best;
}

double read_bytes_per_second(int threads, int repeats) {
  const std::size_t words = kBytes / sizeof(std::uint64_t);
  const auto buffer = filled(1);
  const auto* data = reinterpret_cast<const std::uint64_t*>(buffer->data(0));
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t x = 0;
#pragma omp parallel num_threads(threads) reduction(^ : x)
    {
      const std::size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::uint64_t* p = data + words * t / nt;
      const std::uint64_t* end = data + words * (t + 1) / nt;
      std::uint64_t local = 0;
#pragma omp simd reduction(^ : local)
      for (const std::uint64_t* q = p; q < end; ++q) local ^= *q;
      x ^= local;
    }
    benchmark::DoNotOptimize(x);
    best = std::max(best, kBytes / seconds_since(start));
  }
  return best;
}

double openblas_sgemm_flops(int M, int K, int N, bool weight_out_in, int threads, int repeats) {
  openblas_set_num_threads(threads);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(M) * K), w(static_cast<std::size_t>(K) * N),
      c(static_cast<std::size_t>(M) * N);
  for (auto& x : a) x = u(rng);
  for (auto& x : w) x = u(rng);
  double best = 0.0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first run warms up
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, weight_out_in ? CblasTrans : CblasNoTrans, M, N, K,
                1.0f, a.data(), K, w.data(), weight_out_in ? K : N, 0.0f, c.data(), N);
    const double s = seconds_since(start);
    if (r > 0) best = std::max(best, 2.0 * M * K * N / s);
  }
  return best;
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

}  // namespace kvtier::bench

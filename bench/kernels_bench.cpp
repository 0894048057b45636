// The kernels of issue 6 on GPT-2 124M shapes (L 12, Hkv = H 12, D 64, P 16,
// C 768):
//   CPU: int8 quantise / dequantise of KV blocks (kernels/kv_quant.h), in fp32
//        GB/s, against this machine's memcpy bandwidth (one thread); LayerNorm
//        and GELU (both forms) over 1024 rows, in us and GB/s (on the OpenMP
//        threads, as the forward runs them);
//   GPU (when built with KVTIER_CUDA and a device is present): paged attention
//        decode at batch 1/16/64 and context 1k/4k (time per call and the K/V
//        bytes it reads per second), block gather/scatter bandwidth against
//        cudaMemcpy device-to-device, the int8 kernels, and LayerNorm and GELU
//        on the CPU's shapes, with their ratio to the CPU figures; the
//        batch-invariant matmul (K never split) on the linear layers' and the
//        LM head's shapes at M = 1, 16, 64 and 1024: GFLOP/s and the weight
//        bytes it reads per second.
// Without a device it can use it says why ("no CUDA device: <reason>") and exits 0.
// Prints figures; asserts nothing.
//
//   build/bench/kernels_bench
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/machine_peaks.h"
#include "kernels/gelu.h"
#include "kernels/kv_quant.h"
#include "kernels/layernorm.h"

#if defined(KVTIER_HAVE_CUDA)
#include <cuda_runtime.h>  // the typed cudaMalloc overloads

#include "kernels/cuda/block_gather_cuda.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/gelu_cuda.h"
#include "kernels/cuda/kv_quant_cuda.h"
#include "kernels/cuda/layernorm_cuda.h"
#include "kernels/cuda/matmul_cuda.h"
#include "kernels/cuda/paged_attention_cuda.h"
#endif

namespace {

using namespace kvtier;
using Clock = std::chrono::steady_clock;
using kvtier::bench::seconds_since;

constexpr kernels::KvShape kGpt2{12, 12, 64, 16};
constexpr double kGB = 1e9;
// The forward kernels' shapes: a 1024-token prefill of GPT-2 124M.
constexpr int kRows = 1024, kEmbd = 768;
constexpr float kLayerNormEps = 1e-5f;

// Each CPU figure is the best of this many runs.
constexpr int kRuns = 5;

void cpu_int8() {
  const int n = 32;  // 36 MiB of fp32 KV: past the caches
  const std::size_t floats = kGpt2.floats_per_block(), enc = kernels::kv_quant_bytes(kGpt2);
  std::vector<float> src(n * floats), back(n * floats);
  std::vector<float> packed(n * ((enc + 3) / 4));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : src) x = normal(rng);
  auto block = [&](int b) { return packed.data() + b * ((enc + 3) / 4); };
  const double q = bench::best_seconds(kRuns, [&] {
    for (int b = 0; b < n; ++b) kernels::quantize_block(src.data() + b * floats, kGpt2, block(b));
  });
  const double d = bench::best_seconds(kRuns, [&] {
    for (int b = 0; b < n; ++b)
      kernels::dequantize_block(block(b), kGpt2, back.data() + b * floats);
  });
  const double fp32_bytes = static_cast<double>(n) * floats * sizeof(float);
  const double memcpy_bw = bench::memcpy_bytes_per_second(1);
  std::printf("CPU int8 KV (1 thread, %d blocks of %.2f MiB fp32 -> %.2f MiB):\n", n,
              fp32_bytes / n / (1 << 20), static_cast<double>(enc) / (1 << 20));
  std::printf("  quantise   %6.2f GB/s fp32  (%.2fx memcpy %.2f GB/s)\n", fp32_bytes / q / kGB,
              fp32_bytes / q / memcpy_bw, memcpy_bw / kGB);
  std::printf("  dequantise %6.2f GB/s fp32  (%.2fx memcpy)\n", fp32_bytes / d / kGB,
              fp32_bytes / d / memcpy_bw);
}

// Seconds per call of the CPU LayerNorm and GELU on the forward shapes, for
// the GPU lines' ratios.
struct ForwardCpuTimes {
  double layernorm = 0, gelu_erf = 0, gelu_tanh = 0;
};

// Bytes a kernel over n floats reads and writes once each.
double rw_bytes(long n) { return 2.0 * static_cast<double>(n) * sizeof(float); }

ForwardCpuTimes cpu_forward() {
  const long ln_n = static_cast<long>(kRows) * kEmbd, fc_n = 4 * ln_n;
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(ln_n), y(ln_n), w(kEmbd, 1.0f), b(kEmbd, 0.0f), fc(fc_n);
  for (auto& v : x) v = normal(rng);
  for (auto& v : fc) v = normal(rng);
  const std::vector<float> fc0 = fc;
  ForwardCpuTimes t;
  t.layernorm = bench::best_seconds(kRuns, [&] {
    kernels::layernorm(y.data(), x.data(), w.data(), b.data(), kRows, kEmbd, kLayerNormEps);
  });
  // GELU is in place: each timed call starts from the same values.
  auto gelu_time = [&](void (*gelu)(float*, long)) {
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      std::copy(fc0.begin(), fc0.end(), fc.begin());
      const auto start = Clock::now();
      gelu(fc.data(), fc_n);
      best = std::min(best, seconds_since(start));
    }
    return best;
  };
  t.gelu_erf = gelu_time(kernels::gelu_erf);
  t.gelu_tanh = gelu_time(kernels::gelu_tanh);
  std::printf("CPU forward kernels (%d threads, %d rows, C %d):\n", omp_get_max_threads(), kRows,
              kEmbd);
  std::printf("  layernorm  %8.1f us  %6.2f GB/s\n", t.layernorm * 1e6,
              rw_bytes(ln_n) / t.layernorm / kGB);
  std::printf("  gelu_erf   %8.1f us  %6.2f GB/s  (%ld floats)\n", t.gelu_erf * 1e6,
              rw_bytes(fc_n) / t.gelu_erf / kGB, fc_n);
  std::printf("  gelu_tanh  %8.1f us  %6.2f GB/s\n", t.gelu_tanh * 1e6,
              rw_bytes(fc_n) / t.gelu_tanh / kGB);
  return t;
}

#if defined(KVTIER_HAVE_CUDA)

#define CHECK(expr)                                                      \
  do {                                                                   \
    const cudaError_t e = (expr);                                        \
    if (e != cudaSuccess) {                                              \
      std::printf("CUDA error: %s: %s\n", #expr, cudaGetErrorString(e)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

template <typename T>
T* device_copy(const std::vector<T>& v) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Milliseconds per call of fn() on the default stream, averaged over `iters`
// after a warm-up; best of 3.
template <typename Fn>
double gpu_ms(int iters, Fn&& fn) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  fn();
  CHECK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int rep = 0; rep < 3; ++rep) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) fn();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

void gpu_attention() {
  const int H = 12, D = kGpt2.head_dim, P = kGpt2.page_size;
  std::printf("GPU paged attention decode (one layer, H %d, D %d, P %d):\n", H, D, P);
  std::printf("  %5s %7s %10s %12s\n", "batch", "context", "us/call", "K+V GB/s");
  for (int context : {1024, 4096}) {
    for (int batch : {1, 16, 64}) {
      const int pages = context / P;
      // One block per page per sequence; each block holds every layer (we read layer 0).
      const std::size_t floats = kGpt2.floats_per_block();
      float* pool = nullptr;
      CHECK(cudaMalloc(&pool, static_cast<std::size_t>(batch) * pages * floats * sizeof(float)));
      CHECK(cudaMemset(pool, 0, static_cast<std::size_t>(batch) * pages * floats * sizeof(float)));
      std::vector<const float*> table;
      std::vector<int> row_table, row_pos;
      for (int s = 0; s < batch; ++s) {
        row_table.push_back(static_cast<int>(table.size()));
        row_pos.push_back(context - 1);
        for (int p = 0; p < pages; ++p)
          table.push_back(pool + (static_cast<std::size_t>(s) * pages + p) * floats);
      }
      const float* const* d_table = device_copy(table);
      int* d_rt = device_copy(row_table);
      int* d_pos = device_copy(row_pos);
      std::vector<float> q(static_cast<std::size_t>(batch) * H * D, 0.1f);
      float* d_q = device_copy(q);
      float* d_out = nullptr;
      CHECK(cudaMalloc(&d_out, q.size() * sizeof(float)));
      const kernels::PagedAttentionRows rows =
          kernels::paged_attention_rows(kGpt2, 0, H, d_table, d_rt, d_pos, batch);
      const double ms =
          gpu_ms(20, [&] { CHECK(kernels::paged_attention_cuda(d_out, d_q, rows, 0)); });
      const double kv_bytes = 2.0 * batch * context * kGpt2.n_kv_head * D * sizeof(float);
      std::printf("  %5d %7d %10.1f %12.1f\n", batch, context, ms * 1e3,
                  kv_bytes / (ms * 1e-3) / kGB);
      cudaFree(pool);
      cudaFree(const_cast<const float**>(d_table));
      cudaFree(d_rt);
      cudaFree(d_pos);
      cudaFree(d_q);
      cudaFree(d_out);
    }
  }
}

void gpu_gather_and_int8() {
  const int n = 64;
  const std::size_t bytes = kGpt2.floats_per_block() * sizeof(float),
                    enc = kernels::kv_quant_bytes(kGpt2);
  char* pool = nullptr;
  char* staging = nullptr;
  char* packed = nullptr;
  CHECK(cudaMalloc(&pool, n * bytes));
  CHECK(cudaMalloc(&staging, n * bytes));
  CHECK(cudaMalloc(&packed, n * ((enc + 255) / 256 * 256)));
  CHECK(cudaMemset(pool, 1, n * bytes));
  // The pool's blocks in a scrambled order, as a block table holds them.
  std::vector<void*> blocks;
  std::vector<void*> encoded;
  for (int i = 0; i < n; ++i) {
    blocks.push_back(pool + static_cast<std::size_t>((i * 37) % n) * bytes);
    encoded.push_back(packed + i * ((enc + 255) / 256 * 256));
  }
  void* const* d_blocks = device_copy(blocks);
  void* const* d_encoded = device_copy(encoded);
  const double total = static_cast<double>(n) * bytes;
  const double memcpy_ms = gpu_ms(
      20, [&] { CHECK(cudaMemcpyAsync(staging, pool, n * bytes, cudaMemcpyDeviceToDevice, 0)); });
  const double gather_ms = gpu_ms(20, [&] {
    CHECK(kernels::block_gather_cuda(staging, reinterpret_cast<const void* const*>(d_blocks), n,
                                     bytes, 0));
  });
  const double scatter_ms =
      gpu_ms(20, [&] { CHECK(kernels::block_scatter_cuda(d_blocks, staging, n, bytes, 0)); });
  const double quant_ms = gpu_ms(20, [&] {
    CHECK(kernels::quantize_blocks_cuda(d_encoded, reinterpret_cast<const float* const*>(d_blocks),
                                        n, kGpt2, 0));
  });
  const double dequant_ms = gpu_ms(20, [&] {
    CHECK(kernels::dequantize_blocks_cuda(reinterpret_cast<float* const*>(d_blocks),
                                          reinterpret_cast<const void* const*>(d_encoded), n, kGpt2,
                                          0));
  });
  // Copy bandwidth counts each byte once (read + write = 2x traffic), as cudaMemcpy's does.
  auto gbs = [&](double ms) { return total / (ms * 1e-3) / kGB; };
  std::printf("GPU block moves (%d blocks of %.2f MiB):\n", n, bytes / double(1 << 20));
  std::printf("  cudaMemcpy D2D %7.1f GB/s\n", gbs(memcpy_ms));
  std::printf("  gather         %7.1f GB/s (%.2fx cudaMemcpy)\n", gbs(gather_ms),
              memcpy_ms / gather_ms);
  std::printf("  scatter        %7.1f GB/s (%.2fx cudaMemcpy)\n", gbs(scatter_ms),
              memcpy_ms / scatter_ms);
  std::printf("  int8 quantise  %7.1f GB/s fp32\n", gbs(quant_ms));
  std::printf("  int8 dequantise%7.1f GB/s fp32\n", gbs(dequant_ms));
  cudaFree(pool);
  cudaFree(staging);
  cudaFree(packed);
  cudaFree(const_cast<void**>(d_blocks));
  cudaFree(const_cast<void**>(d_encoded));
}

void gpu_forward(const ForwardCpuTimes& cpu) {
  const long ln_n = static_cast<long>(kRows) * kEmbd, fc_n = 4 * ln_n;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(ln_n), fc(fc_n);
  for (auto& v : x) v = normal(rng);
  for (auto& v : fc) v = normal(rng);
  float* d_x = device_copy(x);
  float* d_w = device_copy(std::vector<float>(kEmbd, 1.0f));
  float* d_b = device_copy(std::vector<float>(kEmbd, 0.0f));
  float* d_y = nullptr;
  CHECK(cudaMalloc(&d_y, ln_n * sizeof(float)));
  const double ln_ms = gpu_ms(50, [&] {
    CHECK(kernels::layernorm_cuda(d_y, d_x, d_w, d_b, kRows, kEmbd, kLayerNormEps, 0));
  });
  // GELU works in place: every call gets a fresh copy of the same values
  // (gpu_ms makes 1 + 3 iters calls), so none runs on values GELU has already
  // shrunk towards 0. So its figures are from DRAM, LayerNorm's mostly from L2.
  const int iters = 20, copies = 1 + 3 * iters;
  float* d_fc = nullptr;
  CHECK(cudaMalloc(&d_fc, copies * fc_n * sizeof(float)));
  auto gelu_ms = [&](cudaError_t (*gelu)(float*, long, cudaStream_t)) {
    for (int c = 0; c < copies; ++c)
      CHECK(cudaMemcpy(d_fc + c * fc_n, fc.data(), fc_n * sizeof(float), cudaMemcpyHostToDevice));
    int next = 0;
    return gpu_ms(iters, [&] { CHECK(gelu(d_fc + (next++ % copies) * fc_n, fc_n, 0)); });
  };
  const double erf_ms = gelu_ms(kernels::gelu_erf_cuda);
  const double tanh_ms = gelu_ms(kernels::gelu_tanh_cuda);
  std::printf("GPU forward kernels (%d rows, C %d):\n", kRows, kEmbd);
  auto line = [](const char* name, double ms, long n, double cpu_s) {
    std::printf("  %-10s %8.1f us  %7.1f GB/s  (%.1fx CPU)\n", name, ms * 1e3,
                rw_bytes(n) / (ms * 1e-3) / kGB, cpu_s / (ms * 1e-3));
  };
  line("layernorm", ln_ms, ln_n, cpu.layernorm);
  line("gelu_erf", erf_ms, fc_n, cpu.gelu_erf);
  line("gelu_tanh", tanh_ms, fc_n, cpu.gelu_tanh);
  cudaFree(d_x);
  cudaFree(d_fc);
  cudaFree(d_w);
  cudaFree(d_b);
  cudaFree(d_y);
}

void gpu_matmul() {
  struct Shape {
    const char* name;
    int K, N;
    kernels::WeightLayout layout;
  };
  const Shape shapes[] = {{"qkv", kEmbd, 3 * kEmbd, kernels::WeightLayout::kInOut},
                          {"attn_proj", kEmbd, kEmbd, kernels::WeightLayout::kInOut},
                          {"fc", kEmbd, 4 * kEmbd, kernels::WeightLayout::kInOut},
                          {"mlp_proj", 4 * kEmbd, kEmbd, kernels::WeightLayout::kInOut},
                          {"lm_head", kEmbd, 50257, kernels::WeightLayout::kOutIn}};
  std::printf("GPU matmul (batch-invariant: one fma chain per output, K never split):\n");
  std::printf("  %-10s %6s %10s %10s %12s\n", "shape", "M", "us/call", "GFLOP/s", "weights GB/s");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (const Shape& s : shapes) {
    std::vector<float> w(static_cast<std::size_t>(s.K) * s.N), x(1024L * s.K);
    for (auto& v : w) v = normal(rng);
    for (auto& v : x) v = normal(rng);
    float* d_w = device_copy(w);
    float* d_x = device_copy(x);
    float* d_y = nullptr;
    CHECK(cudaMalloc(&d_y, 1024L * s.N * sizeof(float)));
    for (int M : {1, 16, 64, 1024}) {
      const double ms = gpu_ms(M == 1024 ? 5 : 20, [&] {
        CHECK(kernels::matmul_cuda(d_y, d_x, d_w, nullptr, M, s.K, s.N, s.layout, 0));
      });
      std::printf("  %-10s %6d %10.1f %10.1f %12.1f\n", s.name, M, ms * 1e3,
                  2.0 * M * s.K * s.N / (ms * 1e-3) / kGB, w.size() * 4.0 / (ms * 1e-3) / kGB);
    }
    cudaFree(d_w);
    cudaFree(d_x);
    cudaFree(d_y);
  }
}

#endif

}  // namespace

int main() {
  cpu_int8();
  [[maybe_unused]] const ForwardCpuTimes cpu = cpu_forward();
#if defined(KVTIER_HAVE_CUDA)
  const std::string missing = kernels::cuda_device_missing();
  if (!missing.empty()) {
    std::printf("GPU: %s; GPU figures skipped\n", missing.c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU: %s\n", prop.name);
  gpu_attention();
  gpu_gather_and_int8();
  gpu_forward(cpu);
  gpu_matmul();
#else
  std::printf(
      "GPU: no CUDA device: built without the CUDA side (KVTIER_CUDA); GPU figures skipped\n");
#endif
  return 0;
}

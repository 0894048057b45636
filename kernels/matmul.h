// Matrix multiply for the linear layers and the LM head.
//
// Shapes: inp is (M, K) row-major, out is (M, N) row-major, bias is (N) or null.
// A weight comes from the model file in either orientation:
//   kOutIn: weight is (N, K) row-major  (PyTorch nn.Linear, nanoGPT checkpoints)
//   kInOut: weight is (K, N) row-major  (Hugging Face GPT-2's Conv1D)
// The reference reads it in place; the fast path reads a PackedWeight made
// from it once, at model load.
//
// Determinism contract (the basis of kvtier's batch invariance):
//   out[m][n] = fma-chain(inp[m][0..K), w[0..K)[n]) + bias[n]
// where the chain starts from 0.0f and applies one fused multiply-add per k in
// increasing k, and the bias (if any) is added once at the end. Every
// implementation follows this exact sequence of roundings, so a row's result
// does not depend on M, on the row's position in the batch, on the weight
// orientation, on the thread count or on the instruction set. matmul() and
// matmul_reference() therefore agree bit for bit.
#pragma once

#include <cstddef>
#include <memory>

namespace kvtier::kernels {

enum class WeightLayout {
  kOutIn,  // (N, K): out-features major
  kInOut,  // (K, N): in-features major
};

// A weight repacked once into the order the fast path reads it: column strips
// of the microkernel's width, each (K, width) row-major and contiguous, zero
// past N. Then every call, at any M, streams each strip front to back (the
// hardware prefetcher's best case), and no call transposes or copies weight
// tiles any more. Packing moves values without touching them, so it cannot
// change a result. Owns its memory: 4 * K * N bytes, rounded up to whole
// strips; the source weight is not referenced after pack() returns.
class PackedWeight {
 public:
  PackedWeight() = default;

  // REQUIRES: K, N > 0; weight holds K * N floats in `layout`. Runs on the
  // OpenMP threads. Throws only std::bad_alloc.
  static PackedWeight pack(const float* weight, int K, int N, WeightLayout layout);

  int in_features() const { return K_; }   // K
  int out_features() const { return N_; }  // N
  std::size_t bytes() const;

 private:
  struct Free {
    void operator()(float* p) const;
  };
  friend void matmul(float*, const float*, const PackedWeight&, const float*, int);

  std::unique_ptr<float[], Free> data_;
  int K_ = 0;
  int N_ = 0;
};

// Fast path: blocked, vectorised, multi-threaded (OpenMP) where the work is
// large. out (M, N) = inp (M, K) x w, + bias (N) if not null.
// REQUIRES: M > 0; w is packed; out does not alias inp or bias.
void matmul(float* out, const float* inp, const PackedWeight& w, const float* bias, int M);

// Plain reference: one scalar std::fma per (m, n, k), in the order above.
void matmul_reference(float* out, const float* inp, const float* weight, const float* bias, int M,
                      int K, int N, WeightLayout layout);

}  // namespace kvtier::kernels

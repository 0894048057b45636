// Matrix multiply for the linear layers and the LM head.
//
// Shapes: inp is (M, K) row-major, out is (M, N) row-major, bias is (N) or null.
// The weight is read in place from the model file in either orientation:
//   kOutIn: weight is (N, K) row-major  (PyTorch nn.Linear, nanoGPT checkpoints)
//   kInOut: weight is (K, N) row-major  (Hugging Face GPT-2's Conv1D)
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

namespace kvtier::kernels {

enum class WeightLayout {
  kOutIn,  // (N, K): out-features major
  kInOut,  // (K, N): in-features major
};

// Fast path: blocked, vectorised, multi-threaded (OpenMP) where the work is large.
// REQUIRES: M, K, N > 0; out does not alias inp, weight or bias.
void matmul(float* out, const float* inp, const float* weight, const float* bias, int M, int K,
            int N, WeightLayout layout);

// Plain reference: one scalar std::fma per (m, n, k), in the order above.
void matmul_reference(float* out, const float* inp, const float* weight, const float* bias, int M,
                      int K, int N, WeightLayout layout);

}  // namespace kvtier::kernels

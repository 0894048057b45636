// Block-wide reductions for the kernels in this folder, in a fixed order
// (warp butterflies, then one over the warps' results), so a kernel's
// result does not depend on timing. Every thread gets the result.
// REQUIRES: blockDim.x a multiple of 32, at most 1024; all threads call.
#pragma once

namespace kvtier::kernels::cuda_detail {

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

// T is float or double. `scratch` is 32 T of shared memory, reusable between
// calls.
template <typename T, typename Op>
__device__ T block_reduce(T v, T identity, Op op, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace kvtier::kernels::cuda_detail

// The paged attention kernel (see kernels/paged_attention.h for the
// arithmetic and kernels/cuda/paged_attention_cuda.h for the launch).
#include "kernels/cuda/paged_attention_cuda.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/paged_attention.h"

namespace kvtier::kernels {
namespace {

constexpr int kDimsPerThread = kAttentionMaxHeadDim / kAttentionTile;

// Thread block = (row blockIdx.x / H, head blockIdx.x % H), kAttentionTile
// threads. Per tile: thread j scores key t0 + j and notes where its value
// row is; the tile's max and weight sum are block reductions; then thread i
// adds the tile's weighted values into dims i, i + kAttentionTile, ...
__global__ void __launch_bounds__(kAttentionTile)
    paged_attention_kernel(float* out, const float* q, PagedAttentionRows rows) {
  __shared__ float qs[kAttentionMaxHeadDim];
  __shared__ float weight[kAttentionTile];
  __shared__ const float* value_row[kAttentionTile];
  __shared__ float scratch[32];
  const int H = rows.n_head, D = rows.head_dim, P = rows.page_size;
  const int r = blockIdx.x / H, h = blockIdx.x % H;
  const int kvh = h / (H / rows.n_kv_head);
  const int tid = threadIdx.x;
  const float* const* table = rows.blocks + rows.row_table[r];
  const int keys = rows.row_pos[r] + 1;
  const long row = (static_cast<long>(r) * H + h) * D;
  for (int d = tid; d < D; d += kAttentionTile) qs[d] = q[row + d];
  __syncthreads();

  const float scale = attention_scale(D);
  float acc[kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;
  SoftmaxRun run;
  for (int t0 = 0; t0 < keys; t0 += kAttentionTile) {
    const int t = t0 + tid;
    float s = -INFINITY;
    const float* v = nullptr;
    if (t < keys) {
      const float* block = table[t / P];
      if (block != nullptr) {
        const float* kp = block + rows.k_offset + static_cast<long>(kvh) * D * P;
        s = attention_key_dot(qs, kp, P, t % P, D) * scale;
        v = block + rows.v_offset + (static_cast<long>(kvh) * P + t % P) * D;
      }
    }
    const float tile_max = cuda_detail::block_reduce(s, -INFINITY, cuda_detail::MaxOp{}, scratch);
    if (tile_max == -INFINITY) continue;  // every key of the tile absent (same for all threads)
    const float c = softmax_run_rescale(run, tile_max);
    const float w = softmax_weight(s, run);
    weight[tid] = w;
    value_row[tid] = v;
    // The reduction's barriers also publish weight[] and value_row[].
    run.sum += cuda_detail::block_reduce(w, 0.0f, cuda_detail::SumOp{}, scratch);
    const int n = min(kAttentionTile, keys - t0);
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = tid + i * kAttentionTile;
      if (d >= D) break;
      float a = acc[i] * c;
      for (int j = 0; j < n; ++j)
        if (value_row[j] != nullptr) a = fmaf(weight[j], value_row[j][d], a);
      acc[i] = a;
    }
    __syncthreads();  // the next tile overwrites weight[] and value_row[]
  }
  const float inv = 1.0f / run.sum;
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = tid + i * kAttentionTile;
    if (d < D) out[row + d] = acc[i] * inv;
  }
}

}  // namespace

cudaError_t paged_attention_cuda(float* out, const float* q, const PagedAttentionRows& rows,
                                 cudaStream_t stream) {
  if (rows.n_rows < 0 || rows.n_head <= 0 || rows.n_kv_head <= 0 ||
      rows.n_head % rows.n_kv_head != 0 || rows.head_dim <= 0 ||
      rows.head_dim > kAttentionMaxHeadDim || rows.page_size <= 0)
    return cudaErrorInvalidValue;
  const long grid = static_cast<long>(rows.n_rows) * rows.n_head;
  if (grid == 0) return cudaSuccess;
  if (grid >= (1L << 31)) return cudaErrorInvalidValue;
  paged_attention_kernel<<<static_cast<unsigned>(grid), kAttentionTile, 0, stream>>>(out, q, rows);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels

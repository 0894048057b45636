// The paged attention kernel (see kernels/paged_attention.h for the
// arithmetic and kernels/cuda/paged_attention_cuda.h for the launch).
#include "kernels/cuda/grid.cuh"
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
  for (int t0 = attention_first_key(rows.row_pos[r], rows.window); t0 < keys;
       t0 += kAttentionTile) {
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

// Thread i of the grid copies element i % (Hkv * D) of row i / (Hkv * D)'s
// key and value.
__global__ void __launch_bounds__(cuda_detail::kElementThreads)
    kv_write_rows_kernel(float* const* blocks, const int* row_table, const int* row_pos, int n_rows,
                         KvShape shape, int layer, const float* k, const float* v, long stride) {
  const int width = shape.n_kv_head * shape.head_dim;
  const long n = static_cast<long>(n_rows) * width;
  for (long e = blockIdx.x * long{blockDim.x} + threadIdx.x; e < n;
       e += long{gridDim.x} * blockDim.x) {
    const int r = static_cast<int>(e / width), i = static_cast<int>(e % width);
    float* block = blocks[row_table[r] + row_pos[r] / shape.page_size];
    const int slot = row_pos[r] % shape.page_size;
    block[kv_key_index(shape, layer, i, slot)] = k[r * stride + i];
    block[kv_value_index(shape, layer, i, slot)] = v[r * stride + i];
  }
}

}  // namespace

cudaError_t kv_write_rows_cuda(float* const* blocks, const int* row_table, const int* row_pos,
                               int n_rows, const KvShape& shape, int layer, const float* k,
                               const float* v, long stride, cudaStream_t stream) {
  if (n_rows < 0 || shape.n_kv_head <= 0 || shape.head_dim <= 0 || shape.page_size <= 0 ||
      layer < 0 || layer >= shape.n_layer ||
      stride < static_cast<long>(shape.n_kv_head) * shape.head_dim)
    return cudaErrorInvalidValue;
  const long n = static_cast<long>(n_rows) * shape.n_kv_head * shape.head_dim;
  if (n == 0) return cudaSuccess;
  kv_write_rows_kernel<<<cuda_detail::element_blocks(n), cuda_detail::kElementThreads, 0, stream>>>(
      blocks, row_table, row_pos, n_rows, shape, layer, k, v, stride);
  return cudaGetLastError();
}

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

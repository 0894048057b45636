// The GPT-2 forward pass on a CUDA device, over paged KV caches in device
// memory: Model::forward's contract, with the weights copied to the GPU once
// and the kernels of kernels/cuda.
//
// Batch invariance holds on the GPU as on the CPU: every kernel computes a
// row from that row alone in a fixed order (the matmul's fma chain in
// increasing k, never split; attention per (row, head); LayerNorm per row
// with a fixed block size), so a chunk's logits are bit-identical whatever
// else is in the batch and however its prompt was chunked. tests check it
// with memcmp.
//
// Against the CPU Model: embedding, LayerNorm, GELU, the residual add and the
// matmuls give the CPU's bits for the same inputs; attention reduces each tile
// in a tree and uses CUDA's expf, so it agrees within ~1e-6 relative, and the
// logits within tolerance, not bits. A sequence's KV therefore belongs to the
// device that computed it: a KV block written by the GPU is not mixed with
// CPU-computed blocks of the same sequence.
//
// The KV pool's blocks are device memory (tiers::cuda_device_region): the
// chunks' SequenceKv tables index it as they index a host pool for Model.
//
// Attention scores for H2O eviction (Chunk::scores) are not gathered here:
// such a batch is refused.
//
// Thread-safety: one thread calls forward() at a time (scratch buffers and
// the stream are the object's). All work runs on the calling thread's
// current device, which must be the one create() ran on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model/gpt2/gpt2_model.h"
#include "kernels/kv_shape.h"

namespace kvtier {

class CudaModel {
 public:
  // Copies `model`'s weights to the current device. Fails with the CUDA
  // runtime's message (no device, out of memory). `model` must outlive the
  // CudaModel (its config and checks are used).
  static std::expected<std::unique_ptr<CudaModel>, std::string> create(const Gpt2Model& model);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const { return model_.config(); }
  // ForwardPass::kv_tag of this forward: its KV is its own (see the top).
  static constexpr std::uint64_t kKvTag = 0x6b762d6375646121ULL;  // "kv-cuda!"

  // Bytes of device memory the weights take.
  std::size_t weight_bytes() const { return weight_bytes_; }

  // Model::forward on the GPU: the same chunks, checks, logits (in host
  // memory, valid until the next call) and before_attention hook (called on
  // this thread before layer l's attention is enqueued). `pool`'s blocks must
  // be device memory. A CUDA failure comes back as the runtime's message; the
  // sequences then do not advance.
  std::expected<std::span<const float>, std::string> forward(
      std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
      const std::function<void(int layer)>& before_attention = {});

 private:
  // A growable device array of T.
  template <typename T>
  struct DeviceArray {
    T* data = nullptr;
    std::size_t size = 0;
    ~DeviceArray() { (void)cudaFree(data); }
    cudaError_t reserve(std::size_t n);
  };
  // One tensor's place in the device copy of the weights.
  struct DeviceLayer {
    const float *ln_1_w, *ln_1_b, *attn_qkv_w, *attn_qkv_b, *attn_proj_w, *attn_proj_b;
    const float *ln_2_w, *ln_2_b, *mlp_fc_w, *mlp_fc_b, *mlp_proj_w, *mlp_proj_b;
  };

  explicit CudaModel(const Gpt2Model& model);
  std::expected<void, std::string> upload_weights();
  std::expected<void, std::string> run(std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
                                       const std::function<void(int layer)>& before_attention);
  // run()'s parts: the rows, block tables and buffers on the device, then
  // one transformer layer of the M rows.
  std::expected<void, std::string> stage(std::span<const Model::Chunk> chunks,
                                         tiers::BlockPool& pool);
  std::expected<void, std::string> run_layer(
      int l, int M, const kernels::KvShape& shape,
      const std::function<void(int layer)>& before_attention);

  const Gpt2Model& model_;
  cudaStream_t stream_ = nullptr;
  DeviceArray<float> weights_;
  std::size_t weight_bytes_ = 0;
  const float *wte_ = nullptr, *wpe_ = nullptr, *ln_f_w_ = nullptr, *ln_f_b_ = nullptr;
  std::vector<DeviceLayer> layers_;

  // Per-forward rows (host, then device): token, position, the row's first
  // entry in the concatenated block tables, and the rows that want logits.
  std::vector<int> tokens_, positions_, row_table_, logit_rows_;
  std::vector<float*> blocks_;
  DeviceArray<int> d_tokens_, d_positions_, d_row_table_;
  DeviceArray<float*> d_blocks_;
  // Activations.
  DeviceArray<float> x_, ln_, qkv_, q_, att_, fc_, logits_in_, logits_;
  std::vector<float> host_logits_;
};

}  // namespace kvtier

// The nanochat forward pass on a CUDA device, over paged KV caches in device
// memory: NanochatModel::forward's contract and arithmetic
// (engine/model/nanochat/nanochat_model.h), every generation, with the
// weights, the embedding and value-embedding tables and the rotary table
// copied to the GPU once, and the kernels of kernels/cuda: the matmul and
// paged attention GPT-2's forward uses (attention with each layer's sliding
// window), RMS norm, rotary, ReLU², softcap, the lambdas' scaled sums, and
// the gated rows of smear and the value embeddings.
//
// Batch invariance as CudaModel's (engine/cuda/cuda_model.h): every kernel
// computes a row from that row, its sequence's KV and its previous token,
// in a fixed order, so a chunk's logits are bit-identical whatever else is
// in the batch and however its prompt was chunked (tests check it with
// memcmp). Against the CPU forward: within tolerance, not bits (attention's
// tree reductions, the norms' sums, CUDA's expf and tanhf), so the GPU's KV
// is its own (CudaModel::kKvTag, as GPT-2's on the GPU).
//
// Attention scores for H2O eviction are not gathered here: such a batch is
// refused.
//
// Memory: the mapped file's pages are dropped as each tensor goes up
// (NanochatWeights::release_resident_pages), so loading holds no table
// resident on the host.
//
// Thread-safety: one thread calls forward() at a time; all work runs on the
// calling thread's current device, which must be the one create() ran on.
#pragma once

#include <cuda_runtime_api.h>

#include <expected>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/cuda/cuda_batch.h"
#include "engine/model/nanochat/nanochat_model.h"
#include "kernels/kv_shape.h"

namespace kvtier {

class CudaNanochatModel {
 public:
  // Copies `model`'s weights to the current device. Fails with the CUDA
  // runtime's message (no device, out of memory), or when the model has
  // more KV heads than the gate kernel takes. `model` must outlive the
  // CudaNanochatModel.
  static std::expected<std::unique_ptr<CudaNanochatModel>, std::string> create(
      const NanochatModel& model);
  ~CudaNanochatModel();
  CudaNanochatModel(const CudaNanochatModel&) = delete;
  CudaNanochatModel& operator=(const CudaNanochatModel&) = delete;

  // Bytes of device memory the weights and tables take.
  std::size_t weight_bytes() const { return weight_bytes_; }

  // NanochatModel::forward on the GPU: the same chunks, checks, logits (in
  // host memory, valid until the next call) and before_attention hook.
  // `pool`'s blocks must be device memory. A CUDA failure comes back as the
  // runtime's message; the sequences then do not advance.
  std::expected<std::span<const float>, std::string> forward(
      std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
      const std::function<void(int layer)>& before_attention = {});

 private:
  struct DeviceLayer {
    const float *c_q, *c_k, *c_v, *c_proj, *mlp_fc, *mlp_proj, *ve_gate, *value_embed;
  };

  explicit CudaNanochatModel(const NanochatModel& model);
  std::expected<void, std::string> upload_weights();
  std::expected<void, std::string> reserve(int M, int R);
  std::expected<void, std::string> run(std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
                                       const std::function<void(int layer)>& before_attention);
  std::expected<void, std::string> embed(int M);
  std::expected<void, std::string> run_layer(
      int l, int M, const kernels::KvShape& shape,
      const std::function<void(int layer)>& before_attention);

  const NanochatModel& model_;
  const NanochatConfig& config_;
  cudaStream_t stream_ = nullptr;
  DeviceArray<float> weights_;
  std::size_t weight_bytes_ = 0;
  const float *wte_ = nullptr, *lm_head_ = nullptr, *smear_gate_ = nullptr;
  const float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  std::vector<DeviceLayer> layers_;

  CudaBatch batch_;
  // Activations.
  DeviceArray<float> x_, x0_, xb_, h_, q_, k_, v_, att_, fc_, logits_in_, logits_;
  std::vector<float> host_logits_;
};

}  // namespace kvtier

#include "engine/cuda/cuda_batch.h"

namespace kvtier {
namespace {

constexpr std::size_t kTensorAlignFloats = 64;  // 256 bytes

std::size_t aligned(std::size_t floats) {
  return (floats + kTensorAlignFloats - 1) / kTensorAlignFloats * kTensorAlignFloats;
}

}  // namespace

std::expected<std::size_t, std::string> upload_tensors(std::span<const DeviceTensor> tensors,
                                                       DeviceArray<float>& into,
                                                       const std::function<void()>& after_each) {
  std::size_t total = 0;
  for (const DeviceTensor& t : tensors)
    if (t.host != nullptr) total += aligned(t.floats);
  KVTIER_CUDA_TRY(into.reserve(total));
  std::size_t offset = 0;
  for (const DeviceTensor& t : tensors) {
    *t.device = nullptr;
    if (t.host == nullptr) continue;
    float* dst = into.data + offset;
    // From pageable memory cudaMemcpy returns once the bytes are staged:
    // the host copy may go then.
    KVTIER_CUDA_TRY(cudaMemcpy(dst, t.host, t.floats * sizeof(float), cudaMemcpyHostToDevice));
    *t.device = dst;
    offset += aligned(t.floats);
    if (after_each) after_each();
  }
  // The forward's stream does not wait for the legacy one the copies went
  // up on.
  KVTIER_CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
  return total * sizeof(float);
}

std::expected<void, std::string> CudaBatch::check(std::span<const Model::Chunk> chunks,
                                                  const tiers::BlockPool& pool) {
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].scores != nullptr)
      return std::unexpected("forward: chunk " + std::to_string(i) +
                             " asks for attention scores, which the GPU forward does not gather");
    if (chunks[i].rotary_offset != 0)
      return std::unexpected("forward: chunk " + std::to_string(i) +
                             " has a rotary offset (cache rotation), which the GPU forward does "
                             "not apply");
  }
  cudaPointerAttributes attributes{};
  if (const cudaError_t err = cudaPointerGetAttributes(&attributes, pool.data(0));
      err != cudaSuccess) {
    return std::unexpected(
        tiers::cuda_error("forward: cudaPointerGetAttributes of the KV pool", err));
  }
  if (attributes.type != cudaMemoryTypeDevice)
    return std::unexpected("forward: the KV pool is not in device memory");
  return {};
}

std::expected<void, std::string> CudaBatch::stage(std::span<const Model::Chunk> chunks,
                                                  tiers::BlockPool& pool, cudaStream_t stream) {
  tokens_.clear();
  previous_.clear();
  positions_.clear();
  row_table_.clear();
  logit_rows_.clear();
  blocks_.clear();
  for (const Model::Chunk& c : chunks) {
    const int first = static_cast<int>(blocks_.size());
    for (int id : c.kv->block_ids())
      blocks_.push_back(id == SequenceKv::kEvictedBlock ? nullptr
                                                        : reinterpret_cast<float*>(pool.data(id)));
    const int n = static_cast<int>(c.tokens.size());
    for (int t = 0; t < n; ++t) {
      if (c.all_logits || t == n - 1) logit_rows_.push_back(static_cast<int>(tokens_.size()));
      tokens_.push_back(c.tokens[t]);
      previous_.push_back(t == 0 ? c.previous_token : c.tokens[t - 1]);
      positions_.push_back(c.kv->length() + t);
      row_table_.push_back(first);
    }
  }
  const std::size_t rows = tokens_.size();
  KVTIER_CUDA_TRY(d_tokens_.reserve(rows));
  KVTIER_CUDA_TRY(d_previous_.reserve(rows));
  KVTIER_CUDA_TRY(d_positions_.reserve(rows));
  KVTIER_CUDA_TRY(d_row_table_.reserve(rows));
  KVTIER_CUDA_TRY(d_blocks_.reserve(blocks_.size()));
  auto upload = [stream](auto* dst, const auto& src) {
    return cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(src[0]), cudaMemcpyHostToDevice,
                           stream);
  };
  KVTIER_CUDA_TRY(upload(d_tokens_.data, tokens_));
  KVTIER_CUDA_TRY(upload(d_previous_.data, previous_));
  KVTIER_CUDA_TRY(upload(d_positions_.data, positions_));
  KVTIER_CUDA_TRY(upload(d_row_table_.data, row_table_));
  KVTIER_CUDA_TRY(upload(d_blocks_.data, blocks_));
  return {};
}

}  // namespace kvtier

#include "engine/cuda/cuda_model.h"

#include <algorithm>

#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/gelu_cuda.h"
#include "kernels/cuda/layernorm_cuda.h"
#include "kernels/cuda/matmul_cuda.h"
#include "kernels/cuda/paged_attention_cuda.h"
#include "kernels/cuda/residual_cuda.h"
#include "kernels/paged_attention.h"
#include "tiers/cuda/cuda_error.h"

namespace kvtier {
namespace {

using tiers::cuda_error;

// Turns a failed CUDA status into the message forward() returns.
#define KVTIER_CUDA_TRY(call)                                             \
  do {                                                                    \
    if (const cudaError_t kvtier_err = (call); kvtier_err != cudaSuccess) \
      return std::unexpected(cuda_error(#call, kvtier_err));              \
  } while (0)

// Each tensor starts on a 256-byte boundary of the device copy.
constexpr std::size_t kTensorAlignFloats = 64;

std::size_t aligned(std::size_t floats) {
  return (floats + kTensorAlignFloats - 1) / kTensorAlignFloats * kTensorAlignFloats;
}

}  // namespace

template <typename T>
cudaError_t CudaModel::DeviceArray<T>::reserve(std::size_t n) {
  if (n <= size) return cudaSuccess;
  const std::size_t grown = std::max(n, size * 2);  // amortised growth
  (void)cudaFree(data);
  data = nullptr;
  size = 0;
  if (const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&data), grown * sizeof(T));
      err != cudaSuccess) {
    data = nullptr;
    return err;
  }
  size = grown;
  return cudaSuccess;
}

CudaModel::CudaModel(const Gpt2Model& model) : model_(model) {}

CudaModel::~CudaModel() {
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

std::expected<std::unique_ptr<CudaModel>, std::string> CudaModel::create(const Gpt2Model& model) {
  std::unique_ptr<CudaModel> m(new CudaModel(model));
  if (const cudaError_t err = cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking);
      err != cudaSuccess) {
    m->stream_ = nullptr;
    return std::unexpected(cuda_error("cudaStreamCreateWithFlags", err));
  }
  if (auto ok = m->upload_weights(); !ok) return std::unexpected(ok.error());
  return m;
}

std::expected<void, std::string> CudaModel::upload_weights() {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const std::size_t C = c.n_embd, W = C + 2 * static_cast<std::size_t>(c.kv_dim()), F = 4 * C;

  // Every tensor, with its host source and its size; the device copy is one
  // allocation laid out in this order.
  struct Tensor {
    const float* host;
    std::size_t floats;
    const float** device;
  };
  std::vector<Tensor> tensors = {
      {w.wte(), static_cast<std::size_t>(c.vocab_size) * C, &wte_},
      {w.wpe(), static_cast<std::size_t>(c.block_size) * C, &wpe_},
      {w.ln_f_w(), C, &ln_f_w_},
      {w.ln_f_b(), C, &ln_f_b_},
  };
  layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& h = w.layer(l);
    DeviceLayer& d = layers_[l];
    tensors.insert(tensors.end(), {
                                      {h.ln_1_w, C, &d.ln_1_w},
                                      {h.ln_1_b, C, &d.ln_1_b},
                                      {h.attn_qkv_w, C * W, &d.attn_qkv_w},
                                      {h.attn_qkv_b, W, &d.attn_qkv_b},
                                      {h.attn_proj_w, C * C, &d.attn_proj_w},
                                      {h.attn_proj_b, C, &d.attn_proj_b},
                                      {h.ln_2_w, C, &d.ln_2_w},
                                      {h.ln_2_b, C, &d.ln_2_b},
                                      {h.mlp_fc_w, C * F, &d.mlp_fc_w},
                                      {h.mlp_fc_b, F, &d.mlp_fc_b},
                                      {h.mlp_proj_w, F * C, &d.mlp_proj_w},
                                      {h.mlp_proj_b, C, &d.mlp_proj_b},
                                  });
  }
  std::size_t total = 0;
  for (const Tensor& t : tensors)
    if (t.host != nullptr) total += aligned(t.floats);
  KVTIER_CUDA_TRY(weights_.reserve(total));
  weight_bytes_ = total * sizeof(float);
  std::size_t offset = 0;
  for (const Tensor& t : tensors) {
    *t.device = nullptr;  // an absent bias stays absent
    if (t.host == nullptr) continue;
    float* dst = weights_.data + offset;
    KVTIER_CUDA_TRY(cudaMemcpy(dst, t.host, t.floats * sizeof(float), cudaMemcpyHostToDevice));
    *t.device = dst;
    offset += aligned(t.floats);
  }
  // A copy from pageable memory returns once the bytes are staged, and the
  // forward's stream does not wait for the legacy one they go up on.
  KVTIER_CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
  return {};
}

std::expected<std::span<const float>, std::string> CudaModel::forward(
    std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
    const std::function<void(int layer)>& before_attention) {
  if (auto ok = model_.check(chunks, pool); !ok) return std::unexpected(ok.error());
  for (std::size_t i = 0; i < chunks.size(); ++i)
    if (chunks[i].scores != nullptr)
      return std::unexpected("forward: chunk " + std::to_string(i) +
                             " asks for attention scores, which the GPU forward does not gather");
  cudaPointerAttributes attributes{};
  if (const cudaError_t err = cudaPointerGetAttributes(&attributes, pool.data(0));
      err != cudaSuccess) {
    return std::unexpected(cuda_error("forward: cudaPointerGetAttributes of the KV pool", err));
  }
  if (attributes.type != cudaMemoryTypeDevice)
    return std::unexpected("forward: the KV pool is not in device memory");
  if (auto ok = run(chunks, pool, before_attention); !ok) {
    // Wait for what was enqueued before the failure: the next call reuses
    // the buffers it may still be reading.
    (void)cudaStreamSynchronize(stream_);
    return std::unexpected(ok.error());
  }
  for (const Model::Chunk& c : chunks) c.kv->advance(static_cast<int>(c.tokens.size()));
  return std::span<const float>(host_logits_);
}

std::expected<void, std::string> CudaModel::run(
    std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
    const std::function<void(int layer)>& before_attention) {
  const ModelConfig& config = model_.config();
  const int C = config.n_embd, V = config.vocab_size;
  const kernels::KvShape shape{config.n_layer, config.n_kv_head, config.head_dim(),
                               chunks[0].kv->page_size()};
  if (auto ok = stage(chunks, pool); !ok) return ok;
  const int M = static_cast<int>(tokens_.size()), R = static_cast<int>(logit_rows_.size());
  cudaStream_t s = stream_;
  const float eps = config.layer_norm_eps;
  KVTIER_CUDA_TRY(
      kernels::embedding_cuda(x_.data, d_tokens_.data, d_positions_.data, wte_, wpe_, M, C, s));
  for (int l = 0; l < config.n_layer; ++l)
    if (auto ok = run_layer(l, M, shape, before_attention); !ok) return ok;

  // Final LayerNorm and the tied LM head, only for the rows that want logits.
  for (int i = 0; i < R; ++i)
    KVTIER_CUDA_TRY(cudaMemcpyAsync(logits_in_.data + static_cast<long>(i) * C,
                                    x_.data + static_cast<long>(logit_rows_[i]) * C,
                                    C * sizeof(float), cudaMemcpyDeviceToDevice, s));
  KVTIER_CUDA_TRY(
      kernels::layernorm_cuda(logits_in_.data, logits_in_.data, ln_f_w_, ln_f_b_, R, C, eps, s));
  KVTIER_CUDA_TRY(kernels::matmul_cuda(logits_.data, logits_in_.data, wte_, nullptr, R, C, V,
                                       kernels::WeightLayout::kOutIn, s));
  host_logits_.resize(static_cast<std::size_t>(R) * V);
  KVTIER_CUDA_TRY(cudaMemcpyAsync(host_logits_.data(), logits_.data,
                                  host_logits_.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  KVTIER_CUDA_TRY(cudaStreamSynchronize(s));
  return {};
}

std::expected<void, std::string> CudaModel::stage(std::span<const Model::Chunk> chunks,
                                                  tiers::BlockPool& pool) {
  const ModelConfig& config = model_.config();
  const int C = config.n_embd, V = config.vocab_size, W = C + 2 * config.kv_dim();
  // Rows in chunk order, each with its chunk's block table.
  tokens_.clear();
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
      positions_.push_back(c.kv->length() + t);
      row_table_.push_back(first);
    }
  }
  const int M = static_cast<int>(tokens_.size()), R = static_cast<int>(logit_rows_.size());
  const std::size_t rows = M;
  KVTIER_CUDA_TRY(d_tokens_.reserve(rows));
  KVTIER_CUDA_TRY(d_positions_.reserve(rows));
  KVTIER_CUDA_TRY(d_row_table_.reserve(rows));
  KVTIER_CUDA_TRY(d_blocks_.reserve(blocks_.size()));
  KVTIER_CUDA_TRY(x_.reserve(rows * C));
  KVTIER_CUDA_TRY(ln_.reserve(rows * C));
  KVTIER_CUDA_TRY(q_.reserve(rows * C));
  KVTIER_CUDA_TRY(att_.reserve(rows * C));
  KVTIER_CUDA_TRY(qkv_.reserve(rows * W));
  KVTIER_CUDA_TRY(fc_.reserve(rows * 4 * C));
  KVTIER_CUDA_TRY(logits_in_.reserve(static_cast<std::size_t>(R) * C));
  KVTIER_CUDA_TRY(logits_.reserve(static_cast<std::size_t>(R) * V));
  auto upload = [&](auto* dst, const auto& src) {
    return cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(src[0]), cudaMemcpyHostToDevice,
                           stream_);
  };
  KVTIER_CUDA_TRY(upload(d_tokens_.data, tokens_));
  KVTIER_CUDA_TRY(upload(d_positions_.data, positions_));
  KVTIER_CUDA_TRY(upload(d_row_table_.data, row_table_));
  KVTIER_CUDA_TRY(upload(d_blocks_.data, blocks_));
  return {};
}

std::expected<void, std::string> CudaModel::run_layer(
    int l, int M, const kernels::KvShape& shape,
    const std::function<void(int layer)>& before_attention) {
  const ModelConfig& config = model_.config();
  const int C = config.n_embd, W = C + 2 * config.kv_dim();
  cudaStream_t s = stream_;
  const float eps = config.layer_norm_eps;
  const auto layout = config.weight_layout;
  const long activations = static_cast<long>(M) * C;
  const DeviceLayer& w = layers_[l];
  KVTIER_CUDA_TRY(kernels::layernorm_cuda(ln_.data, x_.data, w.ln_1_w, w.ln_1_b, M, C, eps, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(qkv_.data, ln_.data, w.attn_qkv_w, w.attn_qkv_b, M, C, W, layout, s));
  KVTIER_CUDA_TRY(kernels::kv_write_rows_cuda(d_blocks_.data, d_row_table_.data, d_positions_.data,
                                              M, shape, l, qkv_.data + C,
                                              qkv_.data + C + config.kv_dim(), W, s));
  // Attention takes q as (M, H, D): the first C floats of each qkv row.
  KVTIER_CUDA_TRY(cudaMemcpy2DAsync(q_.data, C * sizeof(float), qkv_.data, W * sizeof(float),
                                    C * sizeof(float), M, cudaMemcpyDeviceToDevice, s));
  if (before_attention) before_attention(l);
  const auto attention_rows = kernels::paged_attention_rows(
      shape, l, config.n_head, d_blocks_.data, d_row_table_.data, d_positions_.data, M);
  KVTIER_CUDA_TRY(kernels::paged_attention_cuda(att_.data, q_.data, attention_rows, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(ln_.data, att_.data, w.attn_proj_w, w.attn_proj_b, M, C, C, layout, s));
  KVTIER_CUDA_TRY(kernels::residual_add_cuda(x_.data, x_.data, ln_.data, activations, s));

  KVTIER_CUDA_TRY(kernels::layernorm_cuda(ln_.data, x_.data, w.ln_2_w, w.ln_2_b, M, C, eps, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(fc_.data, ln_.data, w.mlp_fc_w, w.mlp_fc_b, M, C, 4 * C, layout, s));
  KVTIER_CUDA_TRY(config.gelu == Gelu::kErf
                      ? kernels::gelu_erf_cuda(fc_.data, 4 * activations, s)
                      : kernels::gelu_tanh_cuda(fc_.data, 4 * activations, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(ln_.data, fc_.data, w.mlp_proj_w, w.mlp_proj_b, M, 4 * C, C, layout, s));
  KVTIER_CUDA_TRY(kernels::residual_add_cuda(x_.data, x_.data, ln_.data, activations, s));
  return {};
}

}  // namespace kvtier

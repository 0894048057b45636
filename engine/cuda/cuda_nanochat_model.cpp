#include "engine/cuda/cuda_nanochat_model.h"

#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/gated_rows_cuda.h"
#include "kernels/cuda/matmul_cuda.h"
#include "kernels/cuda/paged_attention_cuda.h"
#include "kernels/cuda/residual_cuda.h"
#include "kernels/cuda/rmsnorm_cuda.h"
#include "kernels/cuda/rotary_cuda.h"
#include "kernels/paged_attention.h"
#include "kernels/rmsnorm.h"

namespace kvtier {
namespace {

constexpr auto kOutIn = kernels::WeightLayout::kOutIn;
constexpr float kEps = kernels::kRmsNormEps;

}  // namespace

CudaNanochatModel::CudaNanochatModel(const NanochatModel& model)
    : model_(model), config_(model.nanochat_config()) {}

CudaNanochatModel::~CudaNanochatModel() {
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

std::expected<std::unique_ptr<CudaNanochatModel>, std::string> CudaNanochatModel::create(
    const NanochatModel& model) {
  if (model.nanochat_config().n_kv_head > kernels::kGatedRowsMaxGroups)
    return std::unexpected(
        "the GPU forward takes at most " + std::to_string(kernels::kGatedRowsMaxGroups) +
        " KV heads, this model has " + std::to_string(model.nanochat_config().n_kv_head));
  std::unique_ptr<CudaNanochatModel> m(new CudaNanochatModel(model));
  if (const cudaError_t err = cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking);
      err != cudaSuccess) {
    m->stream_ = nullptr;
    return std::unexpected(tiers::cuda_error("cudaStreamCreateWithFlags", err));
  }
  if (auto ok = m->upload_weights(); !ok) return std::unexpected(ok.error());
  return m;
}

std::expected<void, std::string> CudaNanochatModel::upload_weights() {
  const NanochatConfig& c = config_;
  const NanochatWeights& w = model_.weights();
  const kernels::RotaryTable& rope = *model_.rotary();
  // Rows past vocab_size (padding) are never looked up or computed.
  const std::size_t C = c.n_embd, KV = c.kv_dim(), V = c.vocab_size;
  const std::size_t table = static_cast<std::size_t>(rope.positions()) * (c.head_dim() / 2);
  std::vector<DeviceTensor> tensors = {
      {w.wte(), V * C, &wte_},
      {w.lm_head(), V * C, &lm_head_},
      {w.smear_gate(), NanochatConfig::kSmearChannels, &smear_gate_},
      {rope.cos(0), table, &rope_cos_},
      {rope.sin(0), table, &rope_sin_},
  };
  layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const NanochatLayerWeights& h = w.layer(l);
    DeviceLayer& d = layers_[l];
    tensors.insert(
        tensors.end(),
        {
            {h.c_q, C * C, &d.c_q},
            {h.c_k, KV * C, &d.c_k},
            {h.c_v, KV * C, &d.c_v},
            {h.c_proj, C * C, &d.c_proj},
            {h.mlp_fc, 4 * C * C, &d.mlp_fc},
            {h.mlp_proj, 4 * C * C, &d.mlp_proj},
            {h.ve_gate, static_cast<std::size_t>(c.n_kv_head) * c.ve_gate_channels(), &d.ve_gate},
            {h.value_embed, V * KV, &d.value_embed},
        });
  }
  auto bytes = upload_tensors(tensors, weights_, [&w] { w.release_resident_pages(); });
  if (!bytes) return std::unexpected(bytes.error());
  weight_bytes_ = *bytes;
  return {};
}

std::expected<std::span<const float>, std::string> CudaNanochatModel::forward(
    std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
    const std::function<void(int layer)>& before_attention) {
  if (auto ok = model_.check(chunks, pool); !ok) return std::unexpected(ok.error());
  if (auto ok = CudaBatch::check(chunks, pool); !ok) return std::unexpected(ok.error());
  if (auto ok = run(chunks, pool, before_attention); !ok) {
    // Wait for what was enqueued before the failure: the next call reuses
    // the buffers it may still be reading.
    (void)cudaStreamSynchronize(stream_);
    return std::unexpected(ok.error());
  }
  for (const Model::Chunk& c : chunks) c.kv->advance(static_cast<int>(c.tokens.size()));
  return std::span<const float>(host_logits_);
}

std::expected<void, std::string> CudaNanochatModel::reserve(int M, int R) {
  const std::size_t rows = M, C = config_.n_embd, KV = config_.kv_dim();
  for (DeviceArray<float>* a : {&x_, &x0_, &xb_, &h_, &q_, &att_})
    KVTIER_CUDA_TRY(a->reserve(rows * C));
  KVTIER_CUDA_TRY(k_.reserve(rows * KV));
  KVTIER_CUDA_TRY(v_.reserve(rows * KV));
  KVTIER_CUDA_TRY(fc_.reserve(rows * 4 * C));
  KVTIER_CUDA_TRY(logits_in_.reserve(static_cast<std::size_t>(R) * C));
  KVTIER_CUDA_TRY(logits_.reserve(static_cast<std::size_t>(R) * config_.vocab_size));
  return {};
}

std::expected<void, std::string> CudaNanochatModel::run(
    std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
    const std::function<void(int layer)>& before_attention) {
  const NanochatConfig& c = config_;
  const int C = c.n_embd, V = c.vocab_size, L = c.n_layer;
  const kernels::KvShape shape{L, c.n_kv_head, c.head_dim(), chunks[0].kv->page_size()};
  if (auto ok = batch_.stage(chunks, pool, stream_); !ok) return ok;
  const std::vector<int>& logit_rows = batch_.logit_rows();
  const int M = batch_.rows(), R = static_cast<int>(logit_rows.size());
  if (auto ok = reserve(M, R); !ok) return ok;
  cudaStream_t s = stream_;
  const long activations = static_cast<long>(M) * C;
  const NanochatWeights& w = model_.weights();

  if (auto ok = embed(M); !ok) return ok;
  const int backout_layer = c.has_smear() ? L / 2 : -1;
  for (int l = 0; l < L; ++l) {
    if (c.has_lambdas())
      KVTIER_CUDA_TRY(kernels::scale_add_cuda(x_.data, w.resid_lambdas()[l], x_.data,
                                              w.x0_lambdas()[l], x0_.data, activations, s));
    if (auto ok = run_layer(l, M, shape, before_attention); !ok) return ok;
    if (l == backout_layer)
      KVTIER_CUDA_TRY(cudaMemcpyAsync(xb_.data, x_.data, activations * sizeof(float),
                                      cudaMemcpyDeviceToDevice, s));
  }
  if (backout_layer >= 0)
    KVTIER_CUDA_TRY(kernels::scale_add_cuda(x_.data, 1.0f, x_.data, -w.backout_lambda(), xb_.data,
                                            activations, s));

  // The final norm, the untied head over the real vocabulary and the
  // softcap, only for the rows that want logits.
  for (int i = 0; i < R; ++i)
    KVTIER_CUDA_TRY(cudaMemcpyAsync(logits_in_.data + static_cast<long>(i) * C,
                                    x_.data + static_cast<long>(logit_rows[i]) * C,
                                    C * sizeof(float), cudaMemcpyDeviceToDevice, s));
  KVTIER_CUDA_TRY(kernels::rmsnorm_cuda(logits_in_.data, logits_in_.data, R, C, kEps, 1.0f, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(logits_.data, logits_in_.data, lm_head_, nullptr, R, C, V, kOutIn, s));
  KVTIER_CUDA_TRY(kernels::softcap_cuda(logits_.data, static_cast<long>(R) * V, c.softcap, s));
  host_logits_.resize(static_cast<std::size_t>(R) * V);
  KVTIER_CUDA_TRY(cudaMemcpyAsync(host_logits_.data(), logits_.data,
                                  host_logits_.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  KVTIER_CUDA_TRY(cudaStreamSynchronize(s));
  return {};
}

// x = norm(wte[id]); G5: smear's gated share of norm(wte[previous id]);
// x0 = x where the lambdas read it.
std::expected<void, std::string> CudaNanochatModel::embed(int M) {
  const int C = config_.n_embd;
  cudaStream_t s = stream_;
  KVTIER_CUDA_TRY(kernels::gather_rows_cuda(x_.data, wte_, batch_.tokens(), M, C, s));
  KVTIER_CUDA_TRY(kernels::rmsnorm_cuda(x_.data, x_.data, M, C, kEps, 1.0f, s));
  if (config_.has_smear()) {
    KVTIER_CUDA_TRY(kernels::gather_rows_cuda(h_.data, wte_, batch_.previous(), M, C, s));
    KVTIER_CUDA_TRY(kernels::rmsnorm_cuda(h_.data, h_.data, M, C, kEps, 1.0f, s));
    KVTIER_CUDA_TRY(kernels::gated_add_rows_cuda({.out = x_.data,
                                                  .out_stride = C,
                                                  .gate_in = x_.data,
                                                  .gate_in_stride = C,
                                                  .gate_channels = NanochatConfig::kSmearChannels,
                                                  .gate_weight = smear_gate_,
                                                  .groups = 1,
                                                  .width = C,
                                                  .src = h_.data,
                                                  .src_stride = C,
                                                  .skip = batch_.previous(),
                                                  .scale = model_.weights().smear_lambda(),
                                                  .rows = M},
                                                 s));
  }
  if (config_.has_lambdas())
    KVTIER_CUDA_TRY(cudaMemcpyAsync(x0_.data, x_.data, static_cast<long>(M) * C * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s));
  return {};
}

std::expected<void, std::string> CudaNanochatModel::run_layer(
    int l, int M, const kernels::KvShape& shape,
    const std::function<void(int layer)>& before_attention) {
  const NanochatConfig& c = config_;
  const int C = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim(), KV = c.kv_dim();
  const long activations = static_cast<long>(M) * C;
  const DeviceLayer& w = layers_[l];
  cudaStream_t s = stream_;
  KVTIER_CUDA_TRY(kernels::rmsnorm_cuda(h_.data, x_.data, M, C, kEps, 1.0f, s));
  KVTIER_CUDA_TRY(kernels::matmul_cuda(q_.data, h_.data, w.c_q, nullptr, M, C, C, kOutIn, s));
  KVTIER_CUDA_TRY(kernels::matmul_cuda(k_.data, h_.data, w.c_k, nullptr, M, C, KV, kOutIn, s));
  KVTIER_CUDA_TRY(kernels::matmul_cuda(v_.data, h_.data, w.c_v, nullptr, M, C, KV, kOutIn, s));
  if (w.value_embed != nullptr)
    KVTIER_CUDA_TRY(kernels::gated_add_rows_cuda({.out = v_.data,
                                                  .out_stride = KV,
                                                  .gate_in = h_.data,
                                                  .gate_in_stride = C,
                                                  .gate_channels = c.ve_gate_channels(),
                                                  .gate_weight = w.ve_gate,
                                                  .groups = Hkv,
                                                  .width = D,
                                                  .src = w.value_embed,
                                                  .src_stride = KV,
                                                  .src_row = batch_.tokens(),
                                                  .scale = c.ve_gate_scale(),
                                                  .rows = M},
                                                 s));
  KVTIER_CUDA_TRY(
      kernels::rotary_cuda(q_.data, C, H, D, batch_.positions(), rope_cos_, rope_sin_, M, s));
  KVTIER_CUDA_TRY(
      kernels::rotary_cuda(k_.data, KV, Hkv, D, batch_.positions(), rope_cos_, rope_sin_, M, s));
  const float qk_scale = c.qk_scale();
  KVTIER_CUDA_TRY(
      kernels::rmsnorm_cuda(q_.data, q_.data, static_cast<long>(M) * H, D, kEps, qk_scale, s));
  KVTIER_CUDA_TRY(
      kernels::rmsnorm_cuda(k_.data, k_.data, static_cast<long>(M) * Hkv, D, kEps, qk_scale, s));
  KVTIER_CUDA_TRY(kernels::kv_write_rows_cuda(batch_.blocks(), batch_.row_table(),
                                              batch_.positions(), M, shape, l, k_.data, v_.data, KV,
                                              s));
  if (before_attention) before_attention(l);
  auto rows = kernels::paged_attention_rows(shape, l, H, batch_.blocks(), batch_.row_table(),
                                            batch_.positions(), M);
  rows.window = c.window(l);
  KVTIER_CUDA_TRY(kernels::paged_attention_cuda(att_.data, q_.data, rows, s));
  KVTIER_CUDA_TRY(kernels::matmul_cuda(h_.data, att_.data, w.c_proj, nullptr, M, C, C, kOutIn, s));
  KVTIER_CUDA_TRY(kernels::residual_add_cuda(x_.data, x_.data, h_.data, activations, s));

  KVTIER_CUDA_TRY(kernels::rmsnorm_cuda(h_.data, x_.data, M, C, kEps, 1.0f, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(fc_.data, h_.data, w.mlp_fc, nullptr, M, C, 4 * C, kOutIn, s));
  KVTIER_CUDA_TRY(kernels::relu_squared_cuda(fc_.data, 4 * activations, s));
  KVTIER_CUDA_TRY(
      kernels::matmul_cuda(h_.data, fc_.data, w.mlp_proj, nullptr, M, 4 * C, C, kOutIn, s));
  KVTIER_CUDA_TRY(kernels::residual_add_cuda(x_.data, x_.data, h_.data, activations, s));
  return {};
}

}  // namespace kvtier

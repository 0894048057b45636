#include "engine/model/gpt2/gpt2_model.h"

#include <omp.h>

#include <algorithm>

#include "engine/model/kv_fingerprint.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace kvtier {

std::expected<Gpt2Model, std::string> Gpt2Model::load(const std::filesystem::path& dir) {
  auto config = ModelConfig::load(dir / "config.json");
  if (!config) return std::unexpected(config.error());
  auto weights = ModelWeights::load(*config, dir / "model.safetensors");
  if (!weights) return std::unexpected(weights.error());
  return Gpt2Model(std::move(*config), std::move(*weights));
}

Gpt2Model::Gpt2Model(ModelConfig config, ModelWeights weights)
    : Model(std::move(config)), weights_(std::move(weights)) {
  const int C = shape_.n_embd;
  const auto layout = shape_.weight_layout;
  auto pack = [layout](const float* w, int K, int N) {
    return kernels::PackedWeight::pack(w, K, N, layout);
  };
  for (int l = 0; l < shape_.n_layer; ++l) {
    const LayerWeights& w = weights_.layer(l);
    packed_.push_back({pack(w.attn_qkv_w, C, C + 2 * shape_.kv_dim()), pack(w.attn_proj_w, C, C),
                       pack(w.mlp_fc_w, C, 4 * C), pack(w.mlp_proj_w, 4 * C, C)});
  }
  // wte is (V, C) in every file: the out-in orientation of a C -> V head.
  lm_head_ = kernels::PackedWeight::pack(weights_.wte(), C, shape_.vocab_size,
                                         kernels::WeightLayout::kOutIn);
  // Packing read the whole file; from now on it serves only embeddings,
  // LayerNorms and biases, so the process need not keep all of it resident.
  weights_.release_resident_pages();
}

std::size_t Gpt2Model::packed_bytes() const {
  std::size_t bytes = lm_head_.bytes();
  for (const PackedLayer& l : packed_)
    bytes += l.attn_qkv.bytes() + l.attn_proj.bytes() + l.mlp_fc.bytes() + l.mlp_proj.bytes();
  return bytes;
}

// Everything that decides a block's bytes: every weight, the shapes and
// numerics the config fixes (GELU form, orientation, eps). Reads every weight
// once (GPT-2 124M: about 0.05 s). The family's name is not hashed, so GPT-2
// blocks written before families existed keep their keys.
std::uint64_t Gpt2Model::fingerprint(int page_size) const {
  const ModelConfig& c = shape_;
  const ModelWeights& w = weights_;
  KvFingerprint h(page_size);
  for (long v : {c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.vocab_size, c.block_size}) h.i64(v);
  h.i64(c.bias ? 1 : 0);
  h.i64(static_cast<int>(c.gelu));
  h.i64(static_cast<int>(c.weight_layout));
  h.bytes(&c.layer_norm_eps, sizeof c.layer_norm_eps);

  const std::size_t C = c.n_embd, qkv = C + 2 * static_cast<std::size_t>(c.kv_dim());
  h.tensor(w.wte(), static_cast<std::size_t>(c.vocab_size) * C);
  h.tensor(w.wpe(), static_cast<std::size_t>(c.block_size) * C);
  for (int i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = w.layer(i);
    h.tensor(l.ln_1_w, C);
    h.tensor(l.ln_1_b, C);
    h.tensor(l.attn_qkv_w, C * qkv);
    h.tensor(l.attn_qkv_b, qkv);
    h.tensor(l.attn_proj_w, C * C);
    h.tensor(l.attn_proj_b, C);
    h.tensor(l.ln_2_w, C);
    h.tensor(l.ln_2_b, C);
    h.tensor(l.mlp_fc_w, C * 4 * C);
    h.tensor(l.mlp_fc_b, 4 * C);
    h.tensor(l.mlp_proj_w, 4 * C * C);
    h.tensor(l.mlp_proj_b, C);
  }
  h.tensor(w.ln_f_w(), C);
  h.tensor(w.ln_f_b(), C);
  w.release_resident_pages();  // read once, as packing did
  return h.digest();
}

std::expected<void, std::string> Gpt2Model::check(std::span<const Chunk> chunks,
                                                  const tiers::BlockPool& pool) const {
  return check_chunks(chunks, pool, shape_.block_size, shape_.vocab_size, /*rotary=*/false,
                      [&](int page_size) { return kv_layout(page_size); });
}

void Gpt2Model::attention(int layer, int M) {
  const int C = shape_.n_embd, H = shape_.n_head, D = shape_.head_dim();
  const int group_size = H / shape_.n_kv_head;  // query heads per KV head
  const long width = C + 2 * shape_.kv_dim();   // a qkv row: q (C), k (kv_dim), v (kv_dim)
  const KvLayout& layout = layout_;

  // Keys and values of every row first (a row attends to the rows before it
  // in its own chunk; the loop's barrier keeps them ahead of any reader).
  // Then each (group, head) on its own. Neither the grouping nor the thread
  // that runs a group changes a row's arithmetic.
  // Attention scores, for chunks that want them, as ScoreGather says.
  const auto groups = groups_.groups();
  const auto group_rows = groups_.rows();
  const long items = static_cast<long>(groups.size()) * H;
#pragma omp parallel
  {
#pragma omp for schedule(static, AttentionGroups::kTileRows)
    for (int r = 0; r < M; ++r) {
      const float* qkv = qkv_.data() + r * width;
      const auto view = layout.layer_view(block_bases_[rows_[r].chunk].data(), layer);
      kernels::kv_write(view, rows_[r].pos, qkv + C, qkv + C + shape_.kv_dim());
    }
    std::vector<float> scratch(static_cast<std::size_t>(AttentionGroups::kTileRows) *
                               (shape_.block_size + 1));
    ScoreGather::Buffer scores(scores_);
    kernels::AttentionQuery queries[AttentionGroups::kTileRows];
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < items; ++item) {
      const AttentionGroups::Group& group = groups[item / H];
      const int h = static_cast<int>(item % H);
      for (int i = 0; i < group.count; ++i) {
        const int row = group_rows[group.first + i];
        const RowSlot& slot = rows_[row];
        queries[i] = {qkv_.data() + row * width + h * D,
                      att_.data() + static_cast<long>(row) * C + h * D, slot.pos,
                      layout.layer_view(block_bases_[slot.chunk].data(), layer),
                      scores.at(slot.chunk, slot.pos)};
      }
      kernels::attention_queries(queries, group.count, group.shared_keys, h / group_size,
                                 scratch.data());
    }
    scores.merge();
  }
}

std::expected<std::span<const float>, std::string> Gpt2Model::forward(
    std::span<const Chunk> chunks, tiers::BlockPool& pool,
    const std::function<void(int layer)>& before_attention) {
  if (auto ok = check(chunks, pool); !ok) return std::unexpected(ok.error());
  const int C = shape_.n_embd, V = shape_.vocab_size;
  if (const int page = chunks[0].kv->page_size(); layout_.page_size != page)
    layout_ = kv_layout(page);

  // Lay the batch out as rows, and note which rows want logits.
  rows_.clear();
  groups_.plan(chunks, shape_.n_head, omp_get_max_threads());
  block_bases_.resize(chunks.size());
  scores_.plan(chunks);
  std::vector<int> logit_rows;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    const int n = static_cast<int>(c.tokens.size());
    for (int t = 0; t < n; ++t) {
      if (c.all_logits || t == n - 1) logit_rows.push_back(static_cast<int>(rows_.size()));
      rows_.push_back({static_cast<int>(i), c.kv->length() + t});
    }
    block_bases_[i].clear();
    for (int id : c.kv->block_ids())
      block_bases_[i].push_back(
          id == SequenceKv::kEvictedBlock ? nullptr : reinterpret_cast<float*>(pool.data(id)));
  }
  const int M = static_cast<int>(rows_.size());
  x_.resize(static_cast<std::size_t>(M) * C);
  ln_.resize(x_.size());
  att_.resize(x_.size());
  const int qkv_width = C + 2 * shape_.kv_dim();
  qkv_.resize(static_cast<std::size_t>(M) * qkv_width);
  fc_.resize(x_.size() * 4);

  // Token and position embeddings.
  std::vector<int> tokens(M), positions(M);
  for (int r = 0; r < M; ++r) {
    const Chunk& c = chunks[rows_[r].chunk];
    tokens[r] = c.tokens[rows_[r].pos - c.kv->length()];
    positions[r] = rows_[r].pos;
  }
  kernels::embedding(x_.data(), tokens.data(), positions.data(), weights_.wte(), weights_.wpe(), M,
                     C);

  for (int l = 0; l < shape_.n_layer; ++l) {
    const LayerWeights& w = weights_.layer(l);
    const PackedLayer& pw = packed_[l];
    kernels::layernorm(ln_.data(), x_.data(), w.ln_1_w, w.ln_1_b, M, C, shape_.layer_norm_eps);
    kernels::matmul(qkv_.data(), ln_.data(), pw.attn_qkv, w.attn_qkv_b, M);
    if (before_attention) before_attention(l);
    attention(l, M);
    kernels::matmul(ln_.data(), att_.data(), pw.attn_proj, w.attn_proj_b, M);
    kernels::residual_add(x_.data(), x_.data(), ln_.data(), static_cast<long>(x_.size()));

    kernels::layernorm(ln_.data(), x_.data(), w.ln_2_w, w.ln_2_b, M, C, shape_.layer_norm_eps);
    kernels::matmul(fc_.data(), ln_.data(), pw.mlp_fc, w.mlp_fc_b, M);
    if (shape_.gelu == Gelu::kErf)
      kernels::gelu_erf(fc_.data(), static_cast<long>(fc_.size()));
    else
      kernels::gelu_tanh(fc_.data(), static_cast<long>(fc_.size()));
    kernels::matmul(ln_.data(), fc_.data(), pw.mlp_proj, w.mlp_proj_b, M);
    kernels::residual_add(x_.data(), x_.data(), ln_.data(), static_cast<long>(x_.size()));
  }

  // Final LayerNorm and the tied LM head, only for the rows that want logits.
  const int R = static_cast<int>(logit_rows.size());
  logits_in_.resize(static_cast<std::size_t>(R) * C);
  for (int i = 0; i < R; ++i)
    std::copy_n(x_.data() + static_cast<long>(logit_rows[i]) * C, C,
                logits_in_.data() + static_cast<long>(i) * C);
  kernels::layernorm(logits_in_.data(), logits_in_.data(), weights_.ln_f_w(), weights_.ln_f_b(), R,
                     C, shape_.layer_norm_eps);
  logits_.resize(static_cast<std::size_t>(R) * V);
  kernels::matmul(logits_.data(), logits_in_.data(), lm_head_, nullptr, R);

  for (const Chunk& c : chunks) c.kv->advance(static_cast<int>(c.tokens.size()));
  return std::span<const float>(logits_);
}

}  // namespace kvtier

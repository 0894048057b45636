#include "engine/model/nanochat/nanochat_model.h"

#include <omp.h>

#include <algorithm>

#include "engine/model/kv_fingerprint.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gated_rows.h"
#include "kernels/paged_attention.h"
#include "kernels/rmsnorm.h"

namespace kvtier {
std::expected<NanochatModel, std::string> NanochatModel::load(const std::filesystem::path& dir) {
  auto config = NanochatConfig::load(dir / "config.json");
  if (!config) return std::unexpected(config.error());
  auto weights = NanochatWeights::load(*config, dir / "model.safetensors");
  if (!weights) return std::unexpected(weights.error());
  return NanochatModel(std::move(*config), std::move(*weights));
}

NanochatModel::NanochatModel(NanochatConfig config, NanochatWeights weights)
    : Model(config.shape()),
      config_(std::move(config)),
      weights_(std::move(weights)),
      rotary_(config_.head_dim(), config_.rope_base(), config_.context, config_.rope_bf16) {
  const int C = config_.n_embd, KV = config_.kv_dim();
  auto pack = [](const float* w, int K, int N) {
    return kernels::PackedWeight::pack(w, K, N, kernels::WeightLayout::kOutIn);
  };
  // Each layer's pages go once it is packed, so the process never holds the
  // matrices twice (see Memory at the top).
  for (int l = 0; l < config_.n_layer; ++l) {
    const NanochatLayerWeights& w = weights_.layer(l);
    packed_.push_back({pack(w.c_q, C, C), pack(w.c_k, C, KV), pack(w.c_v, C, KV),
                       pack(w.c_proj, C, C), pack(w.mlp_fc, C, 4 * C), pack(w.mlp_proj, 4 * C, C)});
    weights_.release_resident_pages();
  }
  lm_head_ = pack(weights_.lm_head(), C, config_.vocab_size);
  weights_.release_resident_pages();
}

std::uint64_t NanochatModel::fingerprint(int page_size) const {
  const NanochatConfig& c = config_;
  const NanochatWeights& w = weights_;
  KvFingerprint h(page_size);
  h.text("nanochat");
  for (int v : {c.generation, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.vocab_size,
                c.sequence_len, c.context, w.padded_vocab()})
    h.i64(v);
  h.text(c.window_pattern);
  h.f32(c.softcap);
  h.i64(c.rope_bf16 ? 1 : 0);
  const std::size_t C = c.n_embd, KV = c.kv_dim(), Vp = w.padded_vocab();
  h.tensor(w.wte(), Vp * C);
  h.tensor(w.lm_head(), Vp * C);
  w.release_resident_pages();
  for (int i = 0; i < c.n_layer; ++i) {
    const NanochatLayerWeights& l = w.layer(i);
    h.tensor(l.c_q, C * C);
    h.tensor(l.c_k, KV * C);
    h.tensor(l.c_v, KV * C);
    h.tensor(l.c_proj, C * C);
    h.tensor(l.mlp_fc, 4 * C * C);
    h.tensor(l.mlp_proj, 4 * C * C);
    h.tensor(l.ve_gate, static_cast<std::size_t>(c.n_kv_head) * c.ve_gate_channels());
    h.tensor(l.value_embed, Vp * KV);
    w.release_resident_pages();  // read once: the tables need not stay resident
  }
  const std::size_t L = c.n_layer;
  h.tensor(w.resid_lambdas(), L);
  h.tensor(w.x0_lambdas(), L);
  h.f32(w.smear_lambda());
  h.f32(w.backout_lambda());
  h.tensor(w.smear_gate(), NanochatConfig::kSmearChannels);
  return h.digest();
}

std::expected<void, std::string> NanochatModel::check(std::span<const Chunk> chunks,
                                                      const tiers::BlockPool& pool) const {
  if (auto ok = check_chunks(chunks, pool, config_.context, config_.vocab_size, /*rotary=*/true,
                             [&](int page_size) { return kv_layout(page_size); });
      !ok)
    return ok;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    const bool first = c.kv->length() == 0;
    if (first ? c.previous_token != -1
              : c.previous_token < 0 || c.previous_token >= config_.vocab_size)
      return std::unexpected("forward: chunk " + std::to_string(i) + " at position " +
                             std::to_string(c.kv->length()) + " has previous token " +
                             std::to_string(c.previous_token) +
                             (first ? " (none comes before position 0)"
                                    : " (a chunk that continues a sequence names the token "
                                      "before it)"));
  }
  return {};
}

void NanochatModel::embed(int M) {
  const int C = config_.n_embd;
  const float* wte = weights_.wte();
  for (int r = 0; r < M; ++r)
    weights_.copy_row(wte, C, rows_[r].token, x_.data() + static_cast<long>(r) * C);
  kernels::rmsnorm(x_.data(), x_.data(), M, C);
  if (config_.has_smear()) {
    // The previous token's normalised embedding, before smear (h_ as scratch).
    previous_.resize(M);
    for (int r = 0; r < M; ++r) {
      const int prev = previous_[r] = rows_[r].previous;
      float* out = h_.data() + static_cast<long>(r) * C;
      if (prev < 0)
        std::fill_n(out, C, 0.0f);
      else
        weights_.copy_row(wte, C, prev, out);
    }
    kernels::rmsnorm(h_.data(), h_.data(), M, C);
    kernels::gated_add_rows({.out = x_.data(),
                             .out_stride = C,
                             .gate_in = x_.data(),
                             .gate_in_stride = C,
                             .gate_channels = NanochatConfig::kSmearChannels,
                             .gate_weight = weights_.smear_gate(),
                             .groups = 1,
                             .width = C,
                             .src = h_.data(),
                             .src_stride = C,
                             .skip = previous_.data(),
                             .scale = weights_.smear_lambda(),
                             .rows = M});
  }
  if (config_.has_lambdas()) x0_ = x_;
}

void NanochatModel::attention(int layer, int M) {
  const int H = config_.n_head, D = config_.head_dim(), KV = config_.kv_dim();
  const int group_size = H / config_.n_kv_head;
  const int window = config_.window(layer);
  const KvLayout& layout = layout_;
  const auto groups = groups_.groups();
  const auto group_rows = groups_.rows();
  const long items = static_cast<long>(groups.size()) * H;
  // Keys and values of every row first (a row attends to the rows before it
  // in its own chunk; the loop's barrier keeps them ahead of any reader),
  // then each (group, head) on its own, as Gpt2Model does.
#pragma omp parallel
  {
#pragma omp for schedule(static, AttentionGroups::kTileRows)
    for (int r = 0; r < M; ++r) {
      const auto view = layout.layer_view(block_bases_[rows_[r].chunk].data(), layer);
      kernels::kv_write(view, rows_[r].pos, k_.data() + static_cast<long>(r) * KV,
                        v_.data() + static_cast<long>(r) * KV);
    }
    std::vector<float> scratch(static_cast<std::size_t>(AttentionGroups::kTileRows) *
                               (config_.context + 1));
    ScoreGather::Buffer scores(scores_);
    kernels::AttentionQuery queries[AttentionGroups::kTileRows];
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < items; ++item) {
      const AttentionGroups::Group& group = groups[item / H];
      const int h = static_cast<int>(item % H);
      for (int i = 0; i < group.count; ++i) {
        const int r = group_rows[group.first + i];
        const Row& row = rows_[r];
        queries[i] = {q_.data() + static_cast<long>(r) * H * D + h * D,
                      att_.data() + static_cast<long>(r) * H * D + h * D, row.pos,
                      layout.layer_view(block_bases_[row.chunk].data(), layer),
                      scores.at(row.chunk, row.pos)};
        queries[i].first = kernels::attention_first_key(row.pos, window);
      }
      kernels::attention_queries(queries, group.count, group.shared_keys, h / group_size,
                                 scratch.data());
    }
    scores.merge();
  }
}

std::expected<std::span<const float>, std::string> NanochatModel::forward(
    std::span<const Chunk> chunks, tiers::BlockPool& pool,
    const std::function<void(int layer)>& before_attention) {
  if (auto ok = check(chunks, pool); !ok) return std::unexpected(ok.error());
  const int C = config_.n_embd, H = config_.n_head, D = config_.head_dim();
  const int KV = config_.kv_dim(), V = config_.vocab_size, L = config_.n_layer;
  if (const int page = chunks[0].kv->page_size(); layout_.page_size != page)
    layout_ = kv_layout(page);

  rows_.clear();
  groups_.plan(chunks, H, omp_get_max_threads());
  block_bases_.resize(chunks.size());
  scores_.plan(chunks);
  std::vector<int> logit_rows;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    const int n = static_cast<int>(c.tokens.size());
    for (int t = 0; t < n; ++t) {
      if (c.all_logits || t == n - 1) logit_rows.push_back(static_cast<int>(rows_.size()));
      rows_.push_back({static_cast<int>(i), c.kv->length() + t,
                       c.kv->length() + t - c.rotary_offset, c.tokens[t],
                       t == 0 ? c.previous_token : c.tokens[t - 1]});
    }
    block_bases_[i].clear();
    for (int id : c.kv->block_ids())
      block_bases_[i].push_back(
          id == SequenceKv::kEvictedBlock ? nullptr : reinterpret_cast<float*>(pool.data(id)));
  }
  const int M = static_cast<int>(rows_.size());
  const std::size_t rc = static_cast<std::size_t>(M) * C;
  x_.resize(rc);
  h_.resize(rc);
  q_.resize(rc);
  att_.resize(rc);
  k_.resize(static_cast<std::size_t>(M) * KV);
  v_.resize(k_.size());
  fc_.resize(rc * 4);

  embed(M);
  const int backout_layer = config_.has_smear() ? L / 2 : -1;
  for (int l = 0; l < L; ++l) {
    const NanochatLayerWeights& w = weights_.layer(l);
    const PackedLayer& pw = packed_[l];
    if (config_.has_lambdas())
      kernels::scale_add(x_.data(), weights_.resid_lambdas()[l], x_.data(),
                         weights_.x0_lambdas()[l], x0_.data(), static_cast<long>(rc));
    kernels::rmsnorm(h_.data(), x_.data(), M, C);
    kernels::matmul(q_.data(), h_.data(), pw.q, nullptr, M);
    kernels::matmul(k_.data(), h_.data(), pw.k, nullptr, M);
    kernels::matmul(v_.data(), h_.data(), pw.v, nullptr, M);
    if (w.value_embed != nullptr) {
      ve_rows_.resize(static_cast<std::size_t>(M) * KV);
      for (int r = 0; r < M; ++r)
        weights_.copy_row(w.value_embed, KV, rows_[r].token,
                          ve_rows_.data() + static_cast<long>(r) * KV);
      kernels::gated_add_rows({.out = v_.data(),
                               .out_stride = KV,
                               .gate_in = h_.data(),
                               .gate_in_stride = C,
                               .gate_channels = config_.ve_gate_channels(),
                               .gate_weight = w.ve_gate,
                               .groups = config_.n_kv_head,
                               .width = D,
                               .src = ve_rows_.data(),
                               .src_stride = KV,
                               .scale = config_.ve_gate_scale(),
                               .rows = M});
    }
    const float qk_scale = config_.qk_scale();
    for (int r = 0; r < M; ++r) {
      float* q = q_.data() + static_cast<long>(r) * C;
      float* k = k_.data() + static_cast<long>(r) * KV;
      rotary_.apply(q, H, rows_[r].rotary_pos);
      rotary_.apply(k, config_.n_kv_head, rows_[r].rotary_pos);
    }
    kernels::rmsnorm(q_.data(), q_.data(), static_cast<long>(M) * H, D);
    kernels::rmsnorm(k_.data(), k_.data(), static_cast<long>(M) * config_.n_kv_head, D);
    if (qk_scale != 1.0f) {
      for (float& x : q_) x *= qk_scale;
      for (float& x : k_) x *= qk_scale;
    }
    if (before_attention) before_attention(l);
    attention(l, M);
    kernels::matmul(h_.data(), att_.data(), pw.proj, nullptr, M);
    for (std::size_t i = 0; i < rc; ++i) x_[i] += h_[i];

    kernels::rmsnorm(h_.data(), x_.data(), M, C);
    kernels::matmul(fc_.data(), h_.data(), pw.fc, nullptr, M);
    kernels::relu_squared(fc_.data(), static_cast<long>(fc_.size()));
    kernels::matmul(h_.data(), fc_.data(), pw.mlp_proj, nullptr, M);
    for (std::size_t i = 0; i < rc; ++i) x_[i] += h_[i];
    if (l == backout_layer) xb_ = x_;
  }
  if (backout_layer >= 0)
    kernels::scale_add(x_.data(), 1.0f, x_.data(), -weights_.backout_lambda(), xb_.data(),
                       static_cast<long>(rc));

  const int R = static_cast<int>(logit_rows.size());
  logits_in_.resize(static_cast<std::size_t>(R) * C);
  for (int i = 0; i < R; ++i)
    std::copy_n(x_.data() + static_cast<long>(logit_rows[i]) * C, C,
                logits_in_.data() + static_cast<long>(i) * C);
  kernels::rmsnorm(logits_in_.data(), logits_in_.data(), R, C);
  logits_.resize(static_cast<std::size_t>(R) * V);
  kernels::matmul(logits_.data(), logits_in_.data(), lm_head_, nullptr, R);
  kernels::softcap(logits_.data(), static_cast<long>(logits_.size()), config_.softcap);

  for (const Chunk& c : chunks) c.kv->advance(static_cast<int>(c.tokens.size()));
  return std::span<const float>(logits_);
}

}  // namespace kvtier

// The nanochat forward pass on the CPU, over paged KV caches: every
// generation of notes/nanochat.md §2, in fp32, the full-sequence forward as
// the definition (so a chunked prefill carries smear's previous token
// across chunks, which nanochat's own engine does not need: it never
// chunks).
//
// Per position, with norm = RMS norm without weight (kernels/rmsnorm.h):
//   x = norm(wte[id]); G5: x += smear_lambda * sigmoid(x[:24] . smear_gate)
//       * norm(wte[previous id]) (not at position 0); x0 = x
//   per layer i: G2+: x = resid_lambdas[i] * x + x0_lambdas[i] * x0
//     h = norm(x); q, k, v = h Wq, h Wk, h Wv
//     value-embedding layers: v += scale * sigmoid(h[:ch] . ve_gate[kv head])
//       * value_embeds[i][id]
//     q, k: rotary (kernels/rotary.h), then norm per head, then * qk_scale
//     attention over the window (keys p - window .. p; all without one),
//       query heads grouped over KV heads; x += att Wproj
//     x += relu(norm(x) Wfc)^2 Wproj2
//     G5: after layer L/2, keep x_b
//   G5: x -= backout_lambda * x_b
//   logits = softcap * tanh((norm(x) lm_head)[:V] / softcap)
//
// What the cache holds per layer: k after rotary, norm and scale; v after
// the value-embedding mix; as Model's (kv_layout), so tiers move it as they
// move GPT-2's.
//
// Memory: the constructor packs every linear weight and the LM head for
// kernels::matmul; the mapped file (NanochatWeights) is then read only for
// embedding rows (NanochatWeights::copy_row: read from the file, not
// faulted in through the mapping), gates and lambdas, and its pages are
// released as each layer is packed (and as fingerprint() reads them), so
// the process holds the matrices about once and no embedding table.
//
// Batch invariance as Model's: a row's arithmetic depends on that row, its
// sequence's KV and its previous token only, in a fixed order, whatever the
// batch, the chunking or the threads.
//
// Thread-safety: forward() uses scratch buffers the object owns; one thread
// calls it at a time; the kernels inside use OpenMP threads.
#pragma once

#include <expected>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/attention_groups.h"
#include "engine/model/model.h"
#include "engine/model/nanochat/nanochat_config.h"
#include "engine/model/nanochat/nanochat_weights.h"
#include "engine/model/score_gather.h"
#include "kernels/matmul.h"
#include "kernels/rotary.h"
#include "tiers/block_pool.h"

namespace kvtier {

class NanochatModel final : public Model {
 public:
  // Reads <dir>/config.json and <dir>/model.safetensors.
  static std::expected<NanochatModel, std::string> load(const std::filesystem::path& dir);

  NanochatModel(NanochatConfig config, NanochatWeights weights);
  NanochatModel(NanochatModel&&) = default;

  // The family's own config; config() (model.h) is its shape, block_size
  // being the context served.
  const NanochatConfig& nanochat_config() const { return config_; }
  const NanochatWeights& weights() const { return weights_; }
  // cos and sin for every position served (the GPU forward copies them).
  const kernels::RotaryTable* rotary() const override { return &rotary_; }
  // The family, the generation and every setting the forward reads, the
  // shapes and every weight (KvFingerprint).
  std::uint64_t fingerprint(int page_size) const override;

  // As Model::forward. Attention scores (Chunk::scores) sum every layer's,
  // short windows included: a key outside a layer's window gets nothing
  // from that layer.
  std::expected<std::span<const float>, std::string> forward(
      std::span<const Chunk> chunks, tiers::BlockPool& pool,
      const std::function<void(int layer)>& before_attention = {}) override;

  // check_chunks (model.h), and a previous token in the vocabulary for
  // every chunk that does not start its sequence.
  std::expected<void, std::string> check(std::span<const Chunk> chunks,
                                         const tiers::BlockPool& pool) const override;

 private:
  struct Row {
    int chunk;
    int pos;         // its slot in the sequence's block table
    int rotary_pos;  // pos less the chunk's rotary_offset (cache rotation)
    int token;
    int previous;  // the token before, -1 at position 0
  };
  void embed(int M);
  void attention(int layer, int M);

  NanochatConfig config_;
  NanochatWeights weights_;
  kernels::RotaryTable rotary_;
  struct PackedLayer {
    kernels::PackedWeight q, k, v, proj, fc, mlp_proj;
  };
  std::vector<PackedLayer> packed_;
  kernels::PackedWeight lm_head_;  // the first vocab_size rows: padding is never computed

  std::vector<Row> rows_;
  AttentionGroups groups_;
  std::vector<std::vector<float*>> block_bases_;  // per chunk; null for evicted pages
  ScoreGather scores_;                            // chunks that gather attention scores
  // The chunks' layout, for this pass's attention (set once per page size:
  // a layout holds the model's windows, a vector).
  KvLayout layout_;
  std::vector<float> x_, x0_, xb_, h_, q_, k_, v_, att_, fc_, logits_in_, logits_;
  std::vector<float> ve_rows_;  // the rows' value-embedding rows (NanochatWeights::copy_row)
  std::vector<int> previous_;   // per row, the token before (-1 at position 0)
};

}  // namespace kvtier

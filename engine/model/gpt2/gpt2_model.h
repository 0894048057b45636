// The GPT-2 family's forward pass on the CPU (Model, model.h), over paged KV
// caches.
//
// Letters: B = chunks in a batch, M = tokens in the batch (all chunks), C =
// n_embd, H = heads, D = head_dim, V = vocab_size, R = logit rows returned.
//
// One forward() call runs any mix of work in one pass: decode steps (a chunk
// of one token), whole prompts, and pieces of prompts (chunked prefill: a
// chunk attends to its cached prefix and causally to itself). Rows of the
// batch share the linear layers but never each other's keys: there is no
// padding, each row attends only to its own sequence.
//
// Batch invariance: the logits of a chunk's rows are bit-identical whatever
// else is in the batch, whichever position the chunk has in it, and however
// the sequence's earlier tokens were chunked. Every kernel computes a row
// from that row alone in a fixed order (see kernels/matmul.h and
// kernels/attention.h); tests check it with memcmp. Decode rows of
// sequences that share a prompt's pages (forks, the prefix cache) read those
// pages once a step for all of them, with each row's arithmetic unchanged.
//
// Evicted pages (SequenceKv::evict_block) are skipped by attention exactly
// as if masked (kernels/attention.h); queries keep their absolute positions,
// so a token's position embedding never changes.
//
// Memory: the constructor packs every linear weight and the LM head for
// kernels::matmul (a copy the size of the model's matrices); the mapped file
// is then read only for embeddings, LayerNorms and biases, and its pages are
// released from the resident set (ModelWeights::release_resident_pages), so
// the process holds the matrices about once.
//
// Thread-safety: forward() uses scratch buffers the model owns, so one thread
// (the engine's) calls it at a time; the kernels inside use OpenMP threads.
#pragma once

#include <cstddef>
#include <expected>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/attention_groups.h"
#include "engine/model/model.h"
#include "engine/model/model_weights.h"
#include "engine/model/score_gather.h"
#include "kernels/matmul.h"
#include "tiers/block_pool.h"

namespace kvtier {

class Gpt2Model final : public Model {
 public:
  // Reads <dir>/config.json and maps <dir>/model.safetensors.
  static std::expected<Gpt2Model, std::string> load(const std::filesystem::path& dir);

  Gpt2Model(ModelConfig config, ModelWeights weights);
  Gpt2Model(Gpt2Model&&) = default;

  const ModelWeights& weights() const { return weights_; }
  // Bytes of the packed copies of the matrices (see Memory above).
  std::size_t packed_bytes() const;

  std::uint64_t fingerprint(int page_size) const override;

  // Runs the chunks through the model and returns the logits, (R, V) in
  // chunk order: one row per chunk, or tokens.size() rows for all_logits
  // chunks. The span stays valid until the next forward().
  // Fails, changing nothing, when a chunk is empty, a token is outside the
  // vocabulary, a sequence would pass block_size, a sequence appears twice,
  // or a sequence lacks the pages (SequenceKv::reserve them first).
  // `pool` holds the sequences' blocks; its block size must fit the layout.
  //
  // before_attention, when set, is called with each layer's index before the
  // layer reads any cached K/V (and after it has computed the batch's q, k
  // and v): a tier that loads the cache a layer at a time returns from it
  // once that layer is in place (KvCache::await_layer).
  std::expected<std::span<const float>, std::string> forward(
      std::span<const Chunk> chunks, tiers::BlockPool& pool,
      const std::function<void(int layer)>& before_attention = {}) override;

  // Why forward() would refuse this batch, or nothing when it would run it.
  // The GPU forward (engine/cuda/cuda_model.h) applies the same checks.
  std::expected<void, std::string> check(std::span<const Chunk> chunks,
                                         const tiers::BlockPool& pool) const override;

 private:
  void attention(int layer, int M);

  ModelWeights weights_;

  // The matrices in kernels::matmul's order, packed once.
  struct PackedLayer {
    kernels::PackedWeight attn_qkv, attn_proj, mlp_fc, mlp_proj;
  };
  std::vector<PackedLayer> packed_;
  kernels::PackedWeight lm_head_;  // tied to wte

  // Per-forward row bookkeeping and activations, reused across calls.
  struct RowSlot {
    int chunk;
    int pos;
  };
  std::vector<RowSlot> rows_;
  AttentionGroups groups_;
  std::vector<std::vector<float*>> block_bases_;  // per chunk; null for evicted pages
  ScoreGather scores_;                            // chunks that gather attention scores
  // The chunks' layout, for this pass's attention (set once per page size:
  // a layout holds the model's windows, a vector).
  KvLayout layout_;
  std::vector<float> x_, ln_, qkv_, att_, fc_, logits_in_, logits_;
};

}  // namespace kvtier

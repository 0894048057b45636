// A model: one family's forward pass over paged KV caches, behind the one
// interface the scheduler, the cache and its tiers, the device and the
// daemon see. They never learn which family they serve.
//
// The families, a folder each:
//   gpt2/      GPT-2 and nanoGPT (learned positions, LayerNorm, GELU, tied
//              head): Gpt2Model, its config (model_config.h) and weights
//              (model_weights.h), on the CPU and on a GPU (engine/cuda/).
//   nanochat/  nanochat, generations 1 to 5 (rotary, RMS norm, GQA,
//              windows, value embeddings, smear, backout, untied head,
//              softcap): NanochatModel, on the CPU.
// load() picks one by config.json's "format" ("nanochat", else GPT-2's
// dialects).
//
// A third family adds (the recipe):
//   1. a folder engine/model/<family>/ with its config (its config.json
//      dialect, "format": "<family>"), its weights (its tensor table) and its
//      Model subclass: forward() over Model::Chunk, check() through
//      check_chunks(), shape() filled from its config, fingerprint() over
//      its every convention and weight (through KvFingerprint,
//      engine/model/kv_fingerprint.h);
//   2. a line in Model::load (model.cpp) and in read_model_config
//      (model_folder.cpp) for its "format", and its config's source in
//      kvtier_model_front (engine/CMakeLists.txt), the front half the
//      router reads a model folder with;
//   3. in shape(), its family's name, and where its positions are rotary,
//      rotary = true and rotary() (cache rotation turns its cached keys
//      with that table); where its layers slide, their windows (the tiers
//      then bring up only what a query can see);
//   4. its converter in scripts/ and its tests beside the others';
//   5. where the GPU cannot run it yet, nothing: open_device (device.h)
//      serves only Gpt2Model on a GPU and says so.
// The tokenizer and chat format come from the config (TokenizerSpec).
//
// Thread-safety: forward() uses scratch buffers the model owns, so one
// thread (the engine's) calls it at a time; the kernels inside use OpenMP.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "engine/model/kv_layout.h"
#include "engine/model/model_config.h"
#include "engine/model/sequence_kv.h"
#include "kernels/attention.h"
#include "kernels/rotary.h"
#include "tiers/block_pool.h"

namespace kvtier {

class Model {
 public:
  struct Chunk {
    SequenceKv* kv = nullptr;     // positions kv->length() .. +tokens.size() are computed
    std::span<const int> tokens;  // and their K/V appended; kv->length() advances
    bool all_logits = false;      // logits for every token of the chunk, not only the last
    // For H2O eviction: when set, every row's attention probabilities, summed
    // over layers and heads, are added per key position (scores[t] for
    // position t, fixed point as kernels::AttentionScore says). It holds at
    // least kv->length() + tokens.size() entries; positions on evicted pages
    // get nothing. The sums are integers, so they do not depend on the batch,
    // the chunking or the threads. Null (the default) costs nothing. Every
    // family's forward fills it (ScoreGather).
    kernels::AttentionScore* scores = nullptr;
    // The token at position kv->length() - 1, before tokens[0]; -1 at
    // position 0. GPT-2 ignores it; nanochat's generation 5 mixes its
    // embedding into the first token's (smear), so the state a chunk
    // carries over is the sequence's own ids, never something a tier,
    // fork or restart could lose.
    int previous_token = -1;
    // With scores: the rows at positions below this add nothing (SnapKV
    // scores a prompt by its last queries only; EvictionPolicy).
    int scores_from = 0;
    // Cache rotation (EvictionPolicy rotate): positions evicted before this
    // chunk, whose kept keys were turned back to close the holes; the
    // chunk's rotary positions are its positions less this. Slots stay
    // absolute. 0 (the default) unless the family has rotary(); in
    // [0, kv->length()].
    int rotary_offset = 0;
  };

  virtual ~Model() = default;

  // Reads <dir>/config.json and builds the family its "format" names, with
  // <dir>/model.safetensors. Errors name the file and the problem.
  static std::expected<std::unique_ptr<Model>, std::string> load(const std::filesystem::path& dir);

  // The shape every family has: n_layer, n_head, n_kv_head, n_embd,
  // vocab_size (the logits' width), block_size (the positions served) and
  // the tokenizer. (The GPT-2 fields past them are GPT-2's.)
  const ModelConfig& config() const { return shape_; }
  KvLayout kv_layout(int page_size) const { return KvLayout::of(shape_, page_size); }
  // "gpt2" or "nanochat" (ModelConfig::family): for the operator (logs,
  // health).
  std::string_view family() const { return shape_.family; }

  // The rotary table its keys are rotated with, for cache rotation
  // (EvictionPolicy rotate, which moves cached keys to new positions); null
  // where positions are not rotary (GPT-2's are learned and absolute), as
  // config().rotary says.
  virtual const kernels::RotaryTable* rotary() const { return nullptr; }

  // Hash of everything that decides a block's bytes at `page_size`: the
  // family, its every convention and shape, and every weight. Blocks keyed
  // under one model are never served to another.
  virtual std::uint64_t fingerprint(int page_size) const = 0;

  // Runs the chunks through the model and returns the logits, (R, V) in
  // chunk order: one row per chunk, or tokens.size() rows for all_logits
  // chunks. The span stays valid until the next forward().
  // Fails, changing nothing, when check() says why. `pool` holds the
  // sequences' blocks; its block size must fit the layout.
  //
  // before_attention, when set, is called with each layer's index before the
  // layer reads any cached K/V (and after it has computed the batch's q, k
  // and v): a tier that loads the cache a layer at a time returns from it
  // once that layer is in place (KvCache::await_layer).
  virtual std::expected<std::span<const float>, std::string> forward(
      std::span<const Chunk> chunks, tiers::BlockPool& pool,
      const std::function<void(int layer)>& before_attention = {}) = 0;

  // Why forward() would refuse this batch, or nothing when it would run it.
  virtual std::expected<void, std::string> check(std::span<const Chunk> chunks,
                                                 const tiers::BlockPool& pool) const = 0;

 protected:
  explicit Model(ModelConfig shape) : shape_(std::move(shape)) {}
  Model(const Model&) = default;
  Model(Model&&) = default;
  Model& operator=(const Model&) = delete;
  Model& operator=(Model&&) = delete;

  ModelConfig shape_;
};

// What every family's check() checks: a non-empty batch of distinct
// sequences, each chunk non-empty, within `context` positions and its pages,
// not writing into an evicted page, one page size, tokens in
// [0, vocab_size), a rotary offset in [0, kv->length()] and 0 unless the
// family is `rotary`, and a pool whose blocks hold the layout's.
std::expected<void, std::string> check_chunks(std::span<const Model::Chunk> chunks,
                                              const tiers::BlockPool& pool, int context,
                                              int vocab_size, bool rotary,
                                              const std::function<KvLayout(int)>& layout);

}  // namespace kvtier

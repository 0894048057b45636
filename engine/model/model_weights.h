// The parameters of a GPT-2 model, as read-only fp32 pointers into storage the
// ModelWeights object owns: a memory-mapped safetensors file (F32 tensors,
// never copied), a heap buffer of F16/BF16 tensors widened to fp32 at load,
// or a heap buffer of seeded random values for speed work.
//
// Shapes (C = n_embd, V = vocab_size, T = block_size, L = n_layer). Linear
// weights keep the file's orientation, described by config.weight_layout:
//   wte (V, C), wpe (T, C)               embeddings; the LM head is tied to wte
//   ln_1/ln_2/ln_f weight and bias (C)
//   attn_qkv_w  C -> C + 2 kv_dim (3C for GPT-2: q, k, v)    attn_proj_w  C -> C
//   mlp_fc_w    C -> 4C    mlp_proj_w  4C -> C
// Biases are null when config.bias is false.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model_config.h"

namespace kvtier {

struct LayerWeights {
  const float* ln_1_w = nullptr;
  const float* ln_1_b = nullptr;
  const float* attn_qkv_w = nullptr;
  const float* attn_qkv_b = nullptr;
  const float* attn_proj_w = nullptr;
  const float* attn_proj_b = nullptr;
  const float* ln_2_w = nullptr;
  const float* ln_2_b = nullptr;
  const float* mlp_fc_w = nullptr;
  const float* mlp_fc_b = nullptr;
  const float* mlp_proj_w = nullptr;
  const float* mlp_proj_b = nullptr;
};

class ModelWeights {
 public:
  // Maps `safetensors_path` and binds every tensor the config calls for.
  // Accepts nanoGPT state-dict names (transformer.h.0.attn.c_attn.weight, ...,
  // optional lm_head.weight that must equal wte) and Hugging Face GPT-2 names
  // (h.0.attn.c_attn.weight, with or without the "transformer." prefix; the
  // attn.bias / attn.masked_bias mask buffers are ignored). Errors name the
  // problem: bad or truncated header, missing or unexpected tensor, wrong
  // shape or dtype (F32, F16 or BF16; the half-precision ones are widened
  // exactly to fp32 in memory, so they take twice their file size in RAM),
  // misaligned F32 or out-of-file data, an lm_head.weight
  // that differs from wte, and a config with n_kv_head != n_head (GPT-2's fused
  // c_attn is 3C wide). The error lists every missing, unexpected and wrong
  // tensor (up to 8 of each), not just the first. Which names are used comes
  // from the file (where wte is); which orientation, only from the config.
  static std::expected<ModelWeights, std::string> load(
      const ModelConfig& config, const std::filesystem::path& safetensors_path);

  // Random parameters from `seed` for the given shapes: normal(0, 0.02)
  // matrices and embeddings, LayerNorm weight 1 and bias 0, normal(0, 0.01)
  // biases. Same seed, same values, on every machine: the generator uses only
  // integer arithmetic and IEEE + - * / sqrt, not <random> or libm's log.
  // Unlike load(), any n_kv_head is served (attn_qkv_w is C -> C + 2 kv_dim).
  // Every tensor starts 64-byte aligned. Runs on the OpenMP threads; GPT-2
  // 124M takes about 1.2 s of CPU time.
  // REQUIRES: config is valid (as ModelConfig::parse checks). Throws only
  // std::bad_alloc.
  static ModelWeights random(const ModelConfig& config, std::uint64_t seed);

  // Writes these weights to `path` as an F32 safetensors file that load()
  // reads back bit-identical with the same config: Hugging Face names
  // (h.0.attn.c_attn.weight, ...), shapes for config.weight_layout, no
  // lm_head (tied), every tensor 64-byte aligned in the file. For a model
  // folder of random weights (bench/soak --gpt2-124m). Errors name the path.
  // REQUIRES: `config` is the one these weights were made or loaded with.
  std::expected<void, std::string> save(const ModelConfig& config,
                                        const std::filesystem::path& path) const;

  const float* wte() const { return wte_; }
  const float* wpe() const { return wpe_; }
  const LayerWeights& layer(int i) const { return layers_[i]; }
  const float* ln_f_w() const { return ln_f_w_; }
  const float* ln_f_b() const { return ln_f_b_; }

  // Bytes of parameters a forward pass reads (each tensor once; the tied LM head once).
  std::size_t parameter_bytes() const { return parameter_bytes_; }

  // Drops the mapped file's pages from this process's resident set. They
  // stay in the page cache, and a later read faults them back in, so every
  // pointer stays valid and reads the same bytes. For a caller that has
  // copied what it reads most (Model packs the matrices). No-op for random
  // weights, which are not mapped.
  void release_resident_pages() const;

  ModelWeights(ModelWeights&&) noexcept;
  ModelWeights& operator=(ModelWeights&&) noexcept;
  ~ModelWeights();

 private:
  ModelWeights();
  struct Storage;  // the mapping or the heap buffer
  std::unique_ptr<Storage> storage_;
  const float* wte_ = nullptr;
  const float* wpe_ = nullptr;
  std::vector<LayerWeights> layers_;
  const float* ln_f_w_ = nullptr;
  const float* ln_f_b_ = nullptr;
  std::size_t parameter_bytes_ = 0;
};

}  // namespace kvtier

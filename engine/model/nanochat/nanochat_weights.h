// The parameters of a nanochat model, as read-only fp32 pointers, under
// nanochat's own state-dict names (notes/nanochat.md §1; the converter
// strips "_orig_mod."). Linear weights are [out, in]; no biases anywhere.
// C = n_embd, D = head_dim, KV = n_kv_head * D, Vp = the padded vocabulary
// (wte's rows, at least the config's vocab_size), L = n_layer:
//   transformer.wte.weight (Vp, C)          lm_head.weight (Vp, C), untied
//   transformer.h.{i}.attn.c_q.weight (C, C), c_k / c_v (KV, C), c_proj (C, C)
//   transformer.h.{i}.mlp.c_fc.weight (4C, C), c_proj (C, 4C)
//   resid_lambdas, x0_lambdas (L)                         generation 2 on
//   transformer.h.{i}.attn.ve_gate.weight (Hkv, 32 | 12),
//   value_embeds.{i}.weight (Vp, KV)    layers with value embeddings, 3 on
//   smear_lambda, backout_lambda (1), smear_gate.weight (1, 24)      5
//
// Storage: F32 matrices and embedding tables are used in place in the
// mapped file (never copied); the small tensors, F16 and BF16 ones (and an
// F32 one not 4-byte aligned in the file) are widened exactly into one heap
// buffer the object owns. The embedding tables (a
// d20 model's wte and ten value-embedding tables: 3.7 GB) are read a row at
// a time with copy_row, which reads a mapped table from the file rather
// than through the mapping (SafetensorsFile::copy_out), and the model
// releases the pages it packed (release_resident_pages): so the process
// holds neither the tables nor the matrices' file pages resident. Errors
// list every missing, unexpected and wrongly shaped tensor (up to 8 of
// each).
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/nanochat/nanochat_config.h"
#include "engine/model/safetensors.h"

namespace kvtier {

struct NanochatLayerWeights {
  const float* c_q = nullptr;
  const float* c_k = nullptr;
  const float* c_v = nullptr;
  const float* c_proj = nullptr;
  const float* mlp_fc = nullptr;
  const float* mlp_proj = nullptr;
  const float* ve_gate = nullptr;      // null without value embeddings
  const float* value_embed = nullptr;  // (Vp, KV); null without value embeddings
};

class NanochatWeights {
 public:
  static std::expected<NanochatWeights, std::string> load(
      const NanochatConfig& config, const std::filesystem::path& safetensors_path);

  int padded_vocab() const { return padded_vocab_; }
  const float* wte() const { return wte_; }
  const float* lm_head() const { return lm_head_; }
  const NanochatLayerWeights& layer(int i) const { return layers_[i]; }
  const float* resid_lambdas() const { return resid_lambdas_; }  // null before generation 2
  const float* x0_lambdas() const { return x0_lambdas_; }
  float smear_lambda() const { return smear_lambda_ ? *smear_lambda_ : 0.0f; }
  float backout_lambda() const { return backout_lambda_ ? *backout_lambda_ : 0.0f; }
  const float* smear_gate() const { return smear_gate_; }  // null before generation 5

  // Row `id` of `table` (wte(), or a layer's value_embed), `row_floats`
  // wide, into `out`.
  void copy_row(const float* table, std::size_t row_floats, int id, float* out) const;

  // Drops the mapped file's pages from the resident set
  // (SafetensorsFile::release_resident_pages): every pointer stays valid.
  void release_resident_pages() const;

 private:
  NanochatWeights() = default;
  std::optional<SafetensorsFile> file_;  // while any tensor is used in place
  std::unique_ptr<float[]> buffer_;      // the widened ones
  int padded_vocab_ = 0;
  const float* wte_ = nullptr;
  const float* lm_head_ = nullptr;
  std::vector<NanochatLayerWeights> layers_;
  const float* resid_lambdas_ = nullptr;
  const float* x0_lambdas_ = nullptr;
  const float* smear_lambda_ = nullptr;
  const float* backout_lambda_ = nullptr;
  const float* smear_gate_ = nullptr;
};

}  // namespace kvtier

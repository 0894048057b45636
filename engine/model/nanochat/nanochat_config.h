// The shape and conventions of a nanochat model (notes/nanochat.md), read
// from the config.json of a kvtier model folder that scripts/convert_nanochat.py
// writes:
//   {"format": "nanochat", "generation": 1..5, "n_layer", "n_head", "n_kv_head",
//    "n_embd", "vocab_size" (the tokenizer's V; the weights may pad it),
//    "sequence_len", "window_pattern" (generation 2 on; "L" where the
//    checkpoint's meta had none, as nanochat reads it), "softcap" (default 15),
//    "rope_table": "bf16" | "fp32" (required: how the checkpoint was trained),
//    optional "context" (positions served; default sequence_len, at most
//    10 * sequence_len, what nanochat's rotary table covers), "tokenizer"
//    (as model_config.h)}.
// The generation fixes everything the files cannot say (§7 of the notes):
//
//   generation        1      2      3        4                5
//   RoPE base         1e4    1e4    1e4      1e5              1e5
//   q, k scale        1      1      1        1.15             1.2
//   resid/x0 lambdas  -      yes    yes      yes              yes
//   value embeddings  -      -      2σ, 32   3σ, 12           3σ, 12
//   short window      -      S/2    S/2      ceil(S/384)*128  ceil(S/512)*128
//   smear, backout    -      -      -        -                yes
//
// Generation 1 has no windows at all. From 2 on, layer i's window is
// pattern[i % len] ('L' = S, 'S' = short), the last layer always 'L'; a
// query at position p sees keys p - window .. p, so beyond S even 'L'
// layers slide.
#pragma once

#include <expected>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace kvtier {

struct NanochatConfig {
  int generation = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int n_embd = 0;
  int vocab_size = 0;  // V: logits are cropped to it
  int sequence_len = 0;
  int context = 0;  // positions served
  std::string window_pattern;
  float softcap = 15.0f;
  bool rope_bf16 = true;
  TokenizerSpec tokenizer;

  int head_dim() const { return n_embd / n_head; }
  int kv_dim() const { return n_kv_head * head_dim(); }

  // What the generation fixes.
  float rope_base() const { return generation >= 4 ? 100000.0f : 10000.0f; }
  float qk_scale() const { return generation == 5 ? 1.2f : generation == 4 ? 1.15f : 1.0f; }
  bool has_lambdas() const { return generation >= 2; }
  bool has_smear() const { return generation >= 5; }
  // Value embeddings: the gate's input channels (0: none) and its scale.
  int ve_gate_channels() const { return generation >= 4 ? 12 : generation == 3 ? 32 : 0; }
  float ve_gate_scale() const { return generation >= 4 ? 3.0f : 2.0f; }
  // Layers with value embeddings alternate, the last one always among them.
  bool has_value_embedding(int layer) const {
    return ve_gate_channels() > 0 && layer % 2 == (n_layer - 1) % 2;
  }
  // Layer `layer`'s window in positions, or -1 where it sees every key.
  int window(int layer) const;
  // What the rest of kvtier sees (Model::config): the sizes, block_size
  // being the context served, and the tokenizer.
  ModelConfig shape() const;
  // Smear's gate reads this many channels of the embedding.
  static constexpr int kSmearChannels = 24;

  // Parses and validates (the generation, positive sizes within
  // ModelConfig's limits, n_embd divisible by n_head into an even head_dim,
  // n_head divisible by n_kv_head, a pattern of 'S' and 'L' only, a finite
  // positive softcap, the context). Errors name the key. Never throws.
  static std::expected<NanochatConfig, std::string> parse(std::string_view json_text,
                                                          const std::filesystem::path& model_dir);
  // Reads and parses `config_json`; errors start with its path.
  static std::expected<NanochatConfig, std::string> load(const std::filesystem::path& config_json);
};

}  // namespace kvtier

// The shape and conventions of a GPT-2 family model, read from its config.json.
// Its first fields (n_layer through block_size, and the tokenizer) are the
// shape every family fills for the rest of kvtier (Model::config, model.h);
// the rest are GPT-2's.
//
// Two dialects are accepted:
//  * kvtier/nanoGPT: {"format": "nanogpt", "n_layer", "n_head", "n_embd",
//    "vocab_size", "block_size", optional "n_kv_head" (default n_head),
//    "bias" (default true), "gelu": "erf" | "tanh" (required),
//    "weight_layout": "out_in" | "in_out" (default "out_in"),
//    "layer_norm_eps" (default 1e-5), optional "tokenizer"}.
//  * Hugging Face GPT-2: {"model_type": "gpt2", "n_layer", "n_head", "n_embd",
//    "vocab_size", "n_positions", "activation_function" ("gelu_new" -> tanh,
//    "gelu" -> erf; default gelu_new), "layer_norm_epsilon"}; weights are
//    Conv1D (in_out) and carry biases.
// GELU form and weight orientation always come from the config, never from
// guessing at tensor shapes (square matrices cannot tell).
//
// The optional "tokenizer" object names files relative to the model folder:
//   {"type": "char", "vocab": "vocab.json"},
//   {"type": "bpe", "encoder": "encoder.json", "merges": "vocab.bpe"} or
//   {"type": "tiktoken", "ranks": "tokenizer.tiktoken", "pattern": "<split regex>",
//    "special_tokens": {"<|bos|>": 32759, ...}} (tiktoken_tokenizer.h; the
//    pattern is required, at most 4096 bytes; special_tokens optional).
// It always wins. Without it, in either dialect, the folder's files decide, the
// first of these that is there:
//   encoder.json + vocab.bpe     (OpenAI's GPT-2 release)
//   vocab.json + merges.txt      (Hugging Face's names for the same two formats)
//   tokenizer.json               (Hugging Face's one-file form; Tokenizer::load
//                                 accepts it only for GPT-2 byte-level BPE)
// and none of them leaves the model without a tokenizer (kNone). A lone
// vocab.json is not detected: nanoGPT's char vocabularies use that name too.
#pragma once

#include <expected>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/matmul.h"

namespace kvtier {

enum class Gelu { kErf, kTanh };

// A special token of a tiktoken vocabulary: its text and its id.
struct SpecialToken {
  std::string text;
  int id = 0;
};

// The id of the special token written `text` (nanochat's "<|bos|>"), or
// nothing where the vocabulary has none.
std::optional<int> special_token_id(std::span<const SpecialToken> specials, std::string_view text);

struct TokenizerSpec {
  // kBpeTokenizerJson: GPT-2's BPE read from a Hugging Face tokenizer.json.
  enum class Type { kNone, kChar, kBpe, kBpeTokenizerJson, kTiktoken };
  Type type = Type::kNone;
  // char: the vocab file; bpe: encoder.json; tokenizer.json; tiktoken: the ranks
  std::filesystem::path vocab;
  std::filesystem::path merges;              // bpe only: vocab.bpe
  std::string pattern;                       // tiktoken only: the split pattern
  std::vector<SpecialToken> special_tokens;  // tiktoken only

  // The "tokenizer" key of a parsed config.json (or the folder's files, as
  // above, where it has none), for every family's config. Errors name the key.
  static std::expected<TokenizerSpec, std::string> parse(const nlohmann::json& config,
                                                         const std::filesystem::path& model_dir);
};

struct ModelConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;  // key/value heads; equal to n_head for GPT-2 weights
  int n_embd = 0;
  int vocab_size = 0;
  int block_size = 0;  // context length: positions 0 .. block_size-1
  bool bias = true;
  Gelu gelu = Gelu::kErf;
  kernels::WeightLayout weight_layout = kernels::WeightLayout::kOutIn;
  float layer_norm_eps = 1e-5f;
  TokenizerSpec tokenizer;  // paths already resolved against the model folder
  // The family ("gpt2", "nanochat"; Model::family) and whether its positions
  // are rotary (cache rotation can turn its cached keys; GPT-2's are
  // learned): facts a front door checks from the model folder alone.
  std::string family = "gpt2";
  bool rotary = false;
  // Per layer, the positions back a query attends (a query at p reads the
  // keys of p - window .. p), or -1 where it reads them all; empty: every
  // layer reads them all (GPT-2). A family with sliding windows fills it, so
  // the cache need not bring up keys no query can read (KvLayout::windows).
  std::vector<int> windows;

  int head_dim() const { return n_embd / n_head; }
  int kv_dim() const { return n_kv_head * head_dim(); }

  // Parses and validates (positive sizes, n_embd divisible by n_head, n_head
  // divisible by n_kv_head, known enum strings, no negative eps). Errors name
  // the offending key. `model_dir` resolves tokenizer paths.
  // Sizes must be JSON integers (12.0 and "12" are refused) within limits that
  // keep every size product far inside 64 bits: n_layer <= 1024, n_embd <= 65536,
  // vocab_size <= 2^24, block_size <= 2^20. layer_norm_eps must be in (0, 1).
  // Hugging Face configs must also describe plain GPT-2: n_inner null or
  // 4 * n_embd, tie_word_embeddings true if present, activation_function one of
  // gelu_new / gelu_pytorch_tanh (tanh) or gelu (erf). Unknown keys are ignored
  // (training settings such as dropout). Tokenizer files are not opened here,
  // only looked for when the config names none (see above).
  // Never throws.
  static std::expected<ModelConfig, std::string> parse(std::string_view json_text,
                                                       const std::filesystem::path& model_dir);
  // Reads and parses `config_json`; tokenizer paths resolve against its folder and
  // errors start with its path.
  static std::expected<ModelConfig, std::string> load(const std::filesystem::path& config_json);

  // GPT-2 124M shapes (12 layers, 12 heads, 768 wide, 50257 vocab, 1024
  // positions, tanh GELU, in_out layout) for speed work with random weights.
  static ModelConfig gpt2_124m();
};

}  // namespace kvtier

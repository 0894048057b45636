// A nanochat model folder of random weights at any shape, written the way
// scripts/convert_nanochat.py writes a converted checkpoint (config.json and
// an F32 model.safetensors, every tensor 64-byte aligned), without a
// tokenizer: for benches that feed token ids. The tensors are streamed to
// the file a megabyte at a time, so a d20 model (5.6 GB) costs the writer
// no memory.
//
// Values, seeded (util/random.h) and uniform with the spread nanochat's
// init gives each kind: embeddings of standard deviation 1, matrices
// 1/sqrt(fan-in), the gates small, resid lambdas 1, x0 0.1, smear 0.5,
// backout 0.2. Speed does not depend on them; they keep the activations
// finite over every layer.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <string>

namespace kvtier::bench {

struct NanochatShape {
  int generation = 5;
  int n_layer = 20;
  int n_head = 10;
  int n_kv_head = 10;
  int n_embd = 1280;
  int vocab_size = 65536;
  int sequence_len = 2048;
  std::string window_pattern = "SSSL";

  // nanochat's d20, its speedrun's model (the anchor).
  static NanochatShape d20() { return {}; }
};

// Writes `dir`/config.json and `dir`/model.safetensors; `dir` must exist.
// Errors name the file.
std::expected<void, std::string> write_random_nanochat(const std::filesystem::path& dir,
                                                       const NanochatShape& shape,
                                                       std::uint64_t seed);

}  // namespace kvtier::bench

// The soak's GPT-2 124M-shaped model (bench/soak --gpt2-124m, docs/bench.md):
// a model folder kvtierd --model reads, written at run time from seeded
// random weights (ModelWeights::random), never downloaded nor committed.
//
// Thread-safety: none needed; the soak calls it once before its daemons start.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <string>

#include "engine/model/model_config.h"

namespace kvtier::bench {

// Writes `dir`/config.json (kvtier's nanoGPT dialect, from `config`),
// `dir`/model.safetensors (F32 random weights from `seed`: about 500 MB for
// GPT-2 124M) and copies GPT-2's BPE files (encoder.json, vocab.bpe) from
// `bpe_dir`, which the daemon then finds by their names. Creates `dir`.
// Errors name the file.
std::expected<void, std::string> write_random_model(const std::filesystem::path& dir,
                                                    const ModelConfig& config, std::uint64_t seed,
                                                    const std::filesystem::path& bpe_dir);

}  // namespace kvtier::bench

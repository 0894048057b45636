// How the benches that time a forward count and time a prefill, so their
// figures compare: FLOPs of a GPT-2 prefill, and the seconds of one prefill
// of T random tokens into a fresh sequence (the forward alone, not the
// sequence's set-up and release).
#pragma once

#include <chrono>
#include <cstdio>
#include <span>

#include "bench/bench_util.h"
#include "engine/model/model.h"
#include "engine/model/sequence_kv.h"
#include "tiers/block_pool.h"

namespace kvtier::bench {

// FLOPs of one GPT-2 prefill of T tokens (linear layers, attention, one
// LM-head row).
inline double gpt2_prefill_flops(const ModelConfig& c, int T) {
  const double C = c.n_embd, L = c.n_layer;
  const double linear = 2.0 * T * L * (C * 3 * C + C * C + C * 4 * C + 4 * C * C);
  const double attention = L * c.n_head * 2.0 * 2.0 * c.head_dim() * (T * (T + 1.0) / 2.0);
  return linear + attention + 2.0 * C * c.vocab_size;
}

// Seconds of one prefill of T tokens (seeded by T) in pages of `page_size`.
inline double prefill_seconds(Model& model, tiers::BlockPool& pool, int T, int page_size) {
  const auto tokens = random_tokens(T, model.config().vocab_size, T);
  SequenceKv kv(page_size);
  kv.reserve(pool, T);
  const Model::Chunk chunk{&kv, tokens, false};
  const auto start = std::chrono::steady_clock::now();
  auto logits = model.forward(std::span(&chunk, 1), pool);
  const double seconds = seconds_since(start);
  if (!logits) std::fprintf(stderr, "forward: %s\n", logits.error().c_str());
  kv.release(pool);
  return seconds;
}

}  // namespace kvtier::bench

// What the forward-pass tests share (model_test.cpp on the CPU,
// cuda_model_test.cpp on the GPU): small random model shapes, token helpers,
// and the batch-mix check both forwards must pass bit for bit. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <expected>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/model/gpt2/gpt2_model.h"

namespace kvtier::forward_test_util {

inline ModelConfig tiny_config(kernels::WeightLayout layout, Gelu gelu, bool bias, int n_kv_head) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = n_kv_head;
  c.n_embd = 32;
  c.vocab_size = 61;
  c.block_size = 96;
  c.bias = bias;
  c.gelu = gelu;
  c.weight_layout = layout;
  return c;
}

// Both weight orientations, both GELUs, with and without biases, grouped KV.
inline std::vector<ModelConfig> tiny_variants() {
  using kernels::WeightLayout;
  return {tiny_config(WeightLayout::kOutIn, Gelu::kErf, true, 4),
          tiny_config(WeightLayout::kInOut, Gelu::kTanh, true, 4),
          tiny_config(WeightLayout::kOutIn, Gelu::kErf, false, 4),
          tiny_config(WeightLayout::kInOut, Gelu::kErf, true, 2)};
}

inline std::string variant_name(const ModelConfig& c) {
  return std::string(c.weight_layout == kernels::WeightLayout::kOutIn ? "OutIn" : "InOut") +
         (c.gelu == Gelu::kErf ? "_GeluErf" : "_GeluTanh") + (c.bias ? "_Bias" : "_NoBias") +
         "_KvHeads" + std::to_string(c.n_kv_head);
}

inline std::vector<int> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int> t(n);
  for (int& x : t) x = pick(rng);
  return t;
}

inline int argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// A forward pass over the pool the check is given (the CPU's or the GPU's).
using Forward = std::function<std::expected<std::span<const float>, std::string>(
    std::span<const Model::Chunk>)>;

// `seqs` random prompts (1 .. 45 tokens) run alone, prefilled whole and then
// decoded greedily for `decode` steps, then the same sequences in random
// batches of prefill pieces (1 .. 16 tokens) and decode steps in random
// order: every logits row must have the same bits. Blocks come from `pool`
// and all go back to it.
inline ::testing::AssertionResult batch_mixes_match_alone(const Forward& forward,
                                                          tiers::BlockPool& pool, int page_size,
                                                          int vocab, unsigned seed, int seqs = 6,
                                                          int decode = 10) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int>> prompts;
  for (int s = 0; s < seqs; ++s)
    prompts.push_back(random_tokens(rng, std::uniform_int_distribution<int>(1, 45)(rng), vocab));
  auto run =
      [&](std::span<const Model::Chunk> batch) -> std::expected<std::vector<float>, std::string> {
    for (const Model::Chunk& c : batch)
      if (!c.kv->reserve(pool, c.kv->length() + static_cast<int>(c.tokens.size())))
        return std::unexpected("the pool ran out of blocks");
    auto logits = forward(batch);
    if (!logits) return std::unexpected(logits.error());
    return std::vector<float>(logits->begin(), logits->end());
  };

  std::vector<std::vector<std::vector<float>>> alone(seqs);
  for (int s = 0; s < seqs; ++s) {
    SequenceKv kv(page_size);
    const Model::Chunk prompt{&kv, prompts[s], false};
    auto row = run(std::span(&prompt, 1));
    for (int step = 0; row && step <= decode; ++step) {
      alone[s].push_back(*row);
      if (step == decode) break;
      const int next = argmax(*row);
      const Model::Chunk one{&kv, std::span(&next, 1), false};
      row = run(std::span(&one, 1));
    }
    kv.release(pool);
    if (!row) return ::testing::AssertionFailure() << "alone: " << row.error();
  }

  std::vector<SequenceKv> kvs(seqs, SequenceKv(page_size));
  std::vector<std::size_t> fed(seqs, 0);
  std::vector<int> next(seqs, -1);
  std::vector<std::vector<std::vector<float>>> together(seqs);
  std::vector<std::vector<int>> pieces(seqs);
  auto release = [&] {
    for (SequenceKv& kv : kvs) kv.release(pool);
  };
  for (int guard = 0; guard < 1000; ++guard) {
    std::vector<int> who;
    for (int s = 0; s < seqs; ++s) {
      if (static_cast<int>(together[s].size()) == decode + 1) continue;  // done
      if (!std::bernoulli_distribution(0.6)(rng)) continue;              // sits out this step
      if (fed[s] < prompts[s].size()) {
        const std::size_t n = std::min<std::size_t>(std::uniform_int_distribution<int>(1, 16)(rng),
                                                    prompts[s].size() - fed[s]);
        pieces[s].assign(prompts[s].begin() + fed[s], prompts[s].begin() + fed[s] + n);
        fed[s] += n;
      } else {
        pieces[s] = {next[s]};
      }
      who.push_back(s);
    }
    if (who.empty()) {
      if (std::all_of(together.begin(), together.end(),
                      [&](const auto& t) { return static_cast<int>(t.size()) == decode + 1; }))
        break;
      continue;
    }
    std::shuffle(who.begin(), who.end(), rng);
    std::vector<Model::Chunk> batch;
    for (int s : who) batch.push_back({&kvs[s], pieces[s], false});
    auto logits = run(batch);
    if (!logits) {
      release();
      return ::testing::AssertionFailure() << "together: " << logits.error();
    }
    for (std::size_t i = 0; i < who.size(); ++i) {
      const int s = who[i];
      if (fed[s] < prompts[s].size()) continue;  // mid-prompt: logits not used
      const auto row = std::span<const float>(*logits).subspan(i * vocab, vocab);
      together[s].emplace_back(row.begin(), row.end());
      next[s] = argmax(row);
    }
  }
  release();
  for (int s = 0; s < seqs; ++s) {
    if (together[s].size() != alone[s].size())
      return ::testing::AssertionFailure() << "sequence " << s << " did not finish";
    for (std::size_t step = 0; step < alone[s].size(); ++step)
      if (!same_bits(alone[s][step], together[s][step]))
        return ::testing::AssertionFailure()
               << "sequence " << s << " step " << step << ": logits differ from its run alone";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvtier::forward_test_util

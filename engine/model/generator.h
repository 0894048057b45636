// Generating a continuation for one prompt: prefill (whole or in chunks),
// then decode one token per step until a stop condition.
//
// This is the single-request loop; the scheduler batches many requests with
// the same Model::forward and Sampler, so a request's tokens are the same
// either way.
#pragma once

#include <expected>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/kv_evictor.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/model/tokenizer.h"

namespace kvtier {

enum class FinishReason {
  kLength,   // max_tokens generated
  kStop,     // a stop string appeared, or the end-of-text or a stop token
  kContext,  // the sequence reached the model's block_size
};

std::string_view to_string(FinishReason reason);

struct GenerateOptions {
  SamplingParams sampling;
  int max_tokens = 64;
  std::vector<std::string> stop;  // needs a tokenizer
  // Tokens that end the text as the end-of-text token does, writing none
  // (vLLM's stop_token_ids): a chat format's end of turn.
  std::vector<int> stop_token_ids;
  int prefill_chunk = 0;  // tokens per prefill step; 0 = the whole prompt at once
  int page_size = 16;
  // Which KV pages to drop as the sequence grows (engine/model/eviction_policy.h):
  // applied after the forward pass that completes the prompt and after every
  // decode step. The default, none, keeps every page, and the results are
  // exactly what they were before policies existed.
  EvictionPolicy eviction;
  // Generate past the tokenizer's end-of-text token (Tokenizer::end_of_text)
  // instead of stopping there.
  bool ignore_eos = false;
  // Run the tool the model calls, where its vocabulary has one
  // (engine/model/tool_use.h: nanochat's calculator); needs a tokenizer.
  bool tools = true;
};

struct Generation {
  std::vector<int> tokens;  // generated ids (the prompt excluded)
  std::string text;         // their text, cut before a stop string; empty without a tokenizer
  FinishReason finish = FinishReason::kLength;
  int peak_kv_blocks = 0;  // the most KV pages the sequence held at once
  int evicted_blocks = 0;  // pages the eviction policy dropped
};

// The rules every request passes before it reaches the engine, whichever
// loop runs it: a non-empty prompt of in-vocabulary tokens that fits the
// context, max_tokens >= 1, valid sampling parameters, valid stop strings
// (which need a tokenizer) and stop tokens in the vocabulary. The error says
// which rule failed.
std::expected<void, std::string> validate_request(const ModelConfig& config,
                                                  const Tokenizer* tokenizer,
                                                  std::span<const int> prompt, int max_tokens,
                                                  const SamplingParams& sampling,
                                                  const std::vector<std::string>& stop,
                                                  std::span<const int> stop_token_ids);

// Whether a sampled `token` ends the text, writing none: the tokenizer's
// end-of-text (unless ignore_eos) or one of the request's stop tokens.
bool is_stop_token(int token, const Tokenizer* tokenizer, bool ignore_eos,
                   std::span<const int> stop_token_ids);

// Runs the prompt through `model` with KV pages from `pool` (released before
// returning) and samples up to max_tokens tokens. `on_text`, if set, receives
// the text as it becomes final (bytes that might begin a stop string are held
// back until they cannot). Fails with a clear message on a request that
// validate_request() refuses, a bad prefill_chunk, page_size or eviction
// policy, or a pool too small for the sequence (with eviction, too small for
// effective_kv_tokens()).
std::expected<Generation, std::string> generate(
    Model& model, tiers::BlockPool& pool, const Tokenizer* tokenizer, std::span<const int> prompt,
    const GenerateOptions& options, const std::function<void(std::string_view)>& on_text = {});

}  // namespace kvtier

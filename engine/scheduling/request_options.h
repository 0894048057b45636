// What a caller asks of a generation: its options and prompt, validated by
// Scheduler::submit (request.h holds the request as the scheduler tracks
// it). The front doors (wire/, kvtier-router) fill these from JSON, so this
// header needs nothing of the engine but the sampling parameters and the
// eviction policy's types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/eviction_policy.h"
#include "engine/model/sampler.h"

namespace kvtier {

using RequestId = std::uint64_t;

// What a caller asks of a generation, but its prompt: what every front door
// (the daemon's JSON-RPC `generate`, its HTTP API) fills the same way,
// whatever form its prompt comes in.
struct RequestOptions {
  SamplingParams sampling;        // temperature 0 = greedy; `seed` makes sampling reproducible
  int max_tokens = 64;            // tokens to generate at most; generation also ends at the context
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  // Tokens that end the text as the end-of-text token does (a chat format's
  // end of turn; GenerateOptions::stop_token_ids).
  std::vector<int> stop_token_ids;
  int priority = 0;  // 0 = most urgent; only the `priority` policy looks at it
  int n = 1;         // samples from one prefill, 1..kMaxSamples
  // Prefix-cache namespace (a tenant): requests share cached blocks only
  // with requests of the same salt. Empty is the default namespace.
  std::string cache_salt;
  // Which KV pages to drop as the sequence grows (engine/model/eviction_policy.h);
  // unset means the scheduler's default (SchedulerConfig::eviction).
  std::optional<EvictionPolicy> eviction;
  // Each generated token's logprob and the `logprobs` most likely
  // alternatives' (token_logprobs, sampler.h); -1: none.
  int logprobs = -1;
  // Generate past the tokenizer's end-of-text token instead of stopping.
  bool ignore_eos = false;
  // Run the tool the model calls (engine/model/tool_use.h: nanochat's
  // calculator), where its vocabulary has one; unset means the scheduler's
  // default (SchedulerConfig::tools).
  std::optional<bool> tools;
};

// What a caller asks for: the prompt's token ids and the options.
// Scheduler::submit() validates it with the same rules as generate()
// (generator.h), plus the scheduler's own (priority, KV budget).
struct RequestParams : RequestOptions {
  std::vector<int> prompt;
};

// The most samples one request may ask for.
inline constexpr int kMaxSamples = 16;

}  // namespace kvtier

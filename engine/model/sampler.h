// Choosing the next token from logits, and stopping on stop strings.
//
// Determinism: a Sampler owns its request's random stream (seeded from
// SamplingParams::seed), so the tokens a request draws depend only on its own
// logits and seed, never on what else runs, how it was batched, or the
// platform's <random> distributions (which we do not use).
//
// Shapes: logits is (V), V = vocabulary size (50257 for GPT-2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/random.h"

namespace kvtier {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0 = no limit; a value >= V also means no limit
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1 = no limit
  std::uint64_t seed = 0;

  // Clear message for a temperature that is negative or not finite, a
  // negative top_k, or a top_p outside (0, 1].
  std::expected<void, std::string> validate() const;
};

// Draws one token per call from softmax(logits / temperature), restricted
// first to the top_k largest logits and then to the top_p nucleus.
//
// Contract, so that a request's tokens are reproducible from its seed:
//  * temperature 0 is greedy and consumes no randomness.
//  * Otherwise every call consumes exactly one uniform double from the
//    request's own xoshiro256** stream, whatever the logits, so the n-th token
//    depends only on the n-th draw and the n-th logits.
//  * top_k keeps the k largest logits, ties going to the lower id.
//  * top_p keeps the smallest prefix of the tokens ordered by (probability
//    desc, id asc) whose mass is >= top_p of the (top_k-restricted) total;
//    never fewer than one token.
//  * The draw u in [0, 1) picks the first token whose cumulative weight
//    exceeds u * (kept mass). The walk runs in (probability desc, id asc)
//    order when top_k or top_p truncate, and in id order when neither does
//    (this avoids sorting 50257 entries per token; the distribution is the
//    same, only the token a given u maps to differs).
//  * NaN logits count as -inf. A token with logit -inf is never drawn unless
//    every kept logit is -inf (or NaN); then the kept tokens are equally
//    likely. Likewise +inf logits, if any, share all the mass equally.
//
// Thread-safety: not thread-safe; one Sampler per request.
class Sampler {
 public:
  // REQUIRES: params.validate() succeeded.
  explicit Sampler(const SamplingParams& params);

  // REQUIRES: logits is non-empty (and shorter than INT_MAX).
  // Returns an id in [0, logits.size()).
  int sample(std::span<const float> logits);

 private:
  int sample_greedy(std::span<const float> logits) const;
  int sample_untruncated(std::span<const float> logits, double u);
  int sample_truncated(std::span<const float> logits, double u);
  double next_uniform();  // in [0, 1), from the top 53 bits of rng_.next()

  SamplingParams params_;
  util::Xoshiro256StarStar rng_;  // seeded with params_.seed
  // Reused between calls so that sampling from a 50257-entry vocabulary does
  // not allocate. A candidate is a token packed into one integer whose
  // ascending order is (logit desc, id asc); see rank_key() in sampler.cpp.
  std::vector<std::uint64_t> candidates_;
  std::vector<double> weights_;
};

// How likely a token was, as OpenAI's and vLLM's "logprobs" report it: its
// natural-log probability under softmax(logits), the model's own
// distribution (temperature 1, before top_k and top_p, whatever the
// request samples with), and the `top` most likely tokens', in the order
// (logprob desc, id asc). NaN logits count as -inf. Deterministic: the sum
// runs in id order in double precision, so a token's logprob depends only
// on its row's logits. Reporting them changes nothing the Sampler draws.
struct TokenLogprob {
  int token = 0;
  float logprob = 0;
};
struct LogprobsEntry {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};
// The most alternatives one token may report (OpenAI's top_logprobs limit).
inline constexpr int kMaxLogprobs = 20;

// REQUIRES: logits non-empty, token in range, 0 <= top <= kMaxLogprobs.
LogprobsEntry token_logprobs(std::span<const float> logits, int token, int top);

// Limits on stop strings, checked by validate_stop_strings(). They bound the
// per-byte work of StopMatcher::feed().
inline constexpr std::size_t kMaxStopStrings = 16;
inline constexpr std::size_t kMaxStopStringBytes = 256;

// Clear message (naming the offending index) when there are more than
// kMaxStopStrings stops, or a stop is empty or longer than kMaxStopStringBytes.
std::expected<void, std::string> validate_stop_strings(const std::vector<std::string>& stops);

// Finds the earliest occurrence of any stop string in a growing text, even
// one that straddles token boundaries. Matching is on bytes, so a stop may
// also split a UTF-8 character between pieces.
//
// Each stop keeps a Knuth-Morris-Pratt state (the longest suffix of the text
// that is a prefix of the stop), so feed() looks at each new byte once per
// stop and the text itself is never stored or searched again.
//
// Thread-safety: not thread-safe; one StopMatcher per request.
class StopMatcher {
 public:
  // Stops should have passed validate_stop_strings(); an empty stop, which
  // would match everywhere, is ignored here.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `piece` to the text seen so far. Returns the byte offset in the
  // whole text where the first stop string begins, once one has appeared
  // ("first" = lowest start offset among the occurrences present in the text
  // so far). After that the result is fixed: later pieces are ignored and the
  // same offset is returned.
  std::optional<std::size_t> feed(std::string_view piece);

  // How many trailing bytes of the text might still turn into a stop string
  // and so should be held back from a stream: the length of the longest
  // suffix of the text that is a proper prefix of some stop. 0 once a stop has
  // been found (the stream ends at the stop, and all text before it may go).
  std::size_t pending_bytes() const;

 private:
  struct Stop {
    std::string text;
    // border[i] = length of the longest proper prefix of text[0, i] that is
    // also a suffix of it (the KMP failure function).
    std::vector<std::size_t> border;
    std::size_t matched = 0;  // longest suffix of the text that is a prefix of `text`
  };

  std::vector<Stop> stops_;
  std::size_t size_ = 0;  // bytes fed so far
  std::optional<std::size_t> found_;
};

}  // namespace kvtier

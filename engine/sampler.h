// Choosing the next token from logits, and stopping on stop strings.
//
// Determinism: a Sampler owns its request's random stream (seeded from
// SamplingParams::seed), so the tokens a request draws depend only on its own
// logits and seed, never on what else runs, how it was batched, or the
// platform's <random> distributions (which we do not use).
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0 = no limit
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1 = no limit
  std::uint64_t seed = 0;

  // Clear message for a temperature that is negative or not finite, a
  // negative top_k, or a top_p outside (0, 1].
  std::expected<void, std::string> validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // REQUIRES: logits is non-empty and params were valid.
  int sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::uint64_t state_[4];  // xoshiro256** state, expanded from the seed with splitmix64
  std::vector<std::pair<float, int>> scratch_;
};

// Finds the earliest occurrence of any stop string in a growing text, even
// one that straddles token boundaries.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `piece` to the text seen so far. Returns the byte offset in the
  // whole text where the first stop string begins, once one has appeared.
  std::optional<std::size_t> feed(std::string_view piece);

  // How many trailing bytes of the text might still turn into a stop string
  // and so should be held back from a stream.
  std::size_t pending_bytes() const;

 private:
  std::vector<std::string> stops_;
  std::string text_;
};

}  // namespace kvtier

#include "daemon/http/usage.h"

#include "daemon/cache_methods.h"

namespace kvtier::daemon::http {

using nlohmann::json;

json usage_json(const std::vector<GenerateResult>& results) {
  long prompt = 0, completion = 0;
  PerTier<long> cached;
  for (const GenerateResult& r : results) {
    prompt += r.prompt_tokens;
    for (const SampleResult& s : r.samples) completion += static_cast<long>(s.tokens.size());
    for (int t = 0; t < kNumTiers; ++t) cached[t] += r.cached_tokens[t];
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached.total()}}},
          {"kvtier_cached_tokens", per_tier_to_json(cached)}};
}

}  // namespace kvtier::daemon::http

#include "daemon/http/openai.h"

#include <filesystem>

#include "daemon/cache_methods.h"

namespace kvtier::daemon::http {

using nlohmann::json;

std::string served_model_name(const std::string& model_dir) {
  std::filesystem::path dir(model_dir);
  if (!dir.has_filename()) dir = dir.parent_path();  // "models/fortunes-char/"
  const std::string name = dir.filename().string();
  return name.empty() ? std::string("kvtier") : name;
}

const char* openai_finish_reason(const std::string& ours) {
  if (ours == "stop") return "stop";
  if (ours == "cancelled") return "abort";
  return "length";  // "length", "context"
}

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

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace kvtier::daemon::http

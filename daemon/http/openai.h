// What the OpenAI endpoints (models, completions, chat completions) share:
// the model's served name, the answer's usage block, finish reasons in
// OpenAI's words, and ids.
#pragma once

#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/config.h"
#include "daemon/engine_loop.h"

namespace kvtier::daemon::http {

// The name clients address the model by ("model" in a request, "id" in
// /v1/models): the model folder's name, "fortunes-char" for the bundled one.
std::string served_model_name(const std::string& model_dir);
inline std::string served_model_name(const DaemonConfig& config) {
  return served_model_name(config.model_dir);
}

// Seconds since the epoch, for "created".
inline std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

// OpenAI's finish reasons: "stop", "length" ("context", the model's context
// full, is "length" there too, as vLLM says), and "abort" for a cancelled
// sample, as vLLM says.
const char* openai_finish_reason(const std::string& ours);

// OpenAI's usage block, summed over `results` (one per prompt of the
// request): prompt_tokens, completion_tokens, total_tokens,
// prompt_tokens_details.cached_tokens; and our own per-tier split of the
// cached tokens, "kvtier_cached_tokens": {"l1", "l2", "l3", "remote"}.
nlohmann::json usage_json(const std::vector<GenerateResult>& results);

// JSON text with invalid UTF-8 (a BPE token may hold part of a character)
// written as U+FFFD, never an exception.
std::string dump(const nlohmann::json& j);

}  // namespace kvtier::daemon::http

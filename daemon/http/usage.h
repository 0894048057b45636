// OpenAI's usage block of kvtierd's answers, from the engine's results.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "daemon/engine_loop.h"

namespace kvtier::daemon::http {

// OpenAI's usage block, summed over `results` (one per prompt of the
// request): prompt_tokens, completion_tokens, total_tokens,
// prompt_tokens_details.cached_tokens; and our own per-tier split of the
// cached tokens, "kvtier_cached_tokens": {"l1", "l2", "l3", "remote"}.
nlohmann::json usage_json(const std::vector<GenerateResult>& results);

}  // namespace kvtier::daemon::http

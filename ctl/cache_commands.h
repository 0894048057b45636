// kvtierctl's prefix-cache commands: `tiers` and `cache lookup|warm|pin|
// unpin|tree|flush` (docs/protocol.md), and the tier table `top` shows too.
//
// Each run_* sends one request and prints its answer, readable or, with
// json_out, as the raw result on one line; failures come back for main to
// print and turn into an exit code.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ctl/rpc_client.h"

namespace kvtier::ctl {

// The prompt a cache command acts on: text, or token ids when `tokens` is
// not empty; and its namespace.
struct CachePrompt {
  std::string text;
  std::vector<int> tokens;
  std::string cache_salt;
};

// The `tiers` table (the "tiers" object of `tiers` or of `stats.cache`), one
// line per tier, with a header; hit rates from `missed_blocks` when given
// (the blocks looked up are every tier's hits plus the misses). Its columns
// are those that fit in `width` characters, the most telling first; every
// node of a tier on several servers then has a line of its own.
std::string tier_table_text(const nlohmann::json& tiers, long missed_blocks = -1,
                            std::size_t width = std::string::npos);

// The cost model's figures (`tiers.costs`, `stats.cache.costs`) on one line:
// "load or recompute: prefill 1.2 us/token (5 samples); L2 ...".
std::string tier_costs_text(const nlohmann::json& costs);

std::expected<void, CallFailure> run_tiers(RpcClient& client, bool json_out);

// `method`: cache.lookup, cache.warm, cache.pin or cache.unpin.
std::expected<void, CallFailure> run_cache_prompt(RpcClient& client, const std::string& method,
                                                  const CachePrompt& prompt, bool json_out);
std::expected<void, CallFailure> run_cache_tree(RpcClient& client, bool json_out);
std::expected<void, CallFailure> run_cache_flush(RpcClient& client, const std::string& tier,
                                                 bool json_out);

}  // namespace kvtier::ctl

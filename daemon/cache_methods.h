// The prefix cache as the protocol shows it: the JSON of `stats.cache`,
// `tiers`, `cache.lookup`, `cache.pin` / `cache.unpin`, `cache.tree`,
// `cache.flush` and `cache.subscribe` (docs/protocol.md), computed from the
// engine's KvCache.
//
// Sessions never touch the cache: they hand these functions to
// EngineLoop::call, so every one of them runs on the engine thread, which
// owns the scheduler and its cache. Errors are RpcErrors ready to send:
// kNoPrefixCache when the cache is off, kInvalidParams for a prompt the
// model cannot take.
//
// Thread-safety: engine thread only (the *_to_json ones are pure).
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <vector>

#include "daemon/engine_loop.h"
#include "engine/cache/kv_cache.h"
#include "wire/protocol.h"

namespace kvtier::daemon {

// {"l1": {...}, "l2": {...}, "l3": {...}}: per tier capacity_blocks,
// used_blocks, hits, demotions, promotions, bytes_in, bytes_out, bytes_skipped, dropped,
// checksum_failures, io_errors, available, transfers, transfer_mean_us,
// transfer_p99_us.
nlohmann::json tier_table_to_json(const CacheStats& stats);
// The `tiers` method's answer, and GET /tiers's: {"tiers": the tier table,
// "missed_blocks", "costs", "ttft_by_source": {"l1" ... "remote",
// "computed": {"requests", "mean_ms"}}} (RequestMetrics::ttft_by_source).
nlohmann::json tiers_to_json(const CacheStats& stats, const RequestMetrics& requests);
// The load-or-recompute figures, in microseconds.
nlohmann::json tier_costs_to_json(const TierCosts& costs);
// `stats.cache`: the tier table, the cache-wide counters and the costs.
nlohmann::json cache_stats_to_json(const CacheStats& stats);
// `{"l1": v[L1], "l2": v[L2], "l3": v[L3]}`: every per-tier figure on the wire.
template <typename T>
nlohmann::json per_tier_to_json(const PerTier<T>& v) {
  nlohmann::json out = nlohmann::json::object();
  for (int t = 0; t < kNumTiers; ++t) out[to_string(static_cast<Tier>(t))] = v[t];
  return out;
}

// `cache.subscribe`'s answer: {"seq", "fingerprint" (16 hex digits),
// "page_size", "blocks": [{"block": <32 hex digits>, "tier": "l1"}, ...]}.
nlohmann::json cache_snapshot_to_json(const EngineLoop::CacheSnapshot& snapshot);
// A `cache.events` notification's params: {"seq", "events": [{"block",
// "tier", "stored"}, ...]}.
nlohmann::json cache_events_to_json(const EngineLoop::CacheEvents& batch);

// The error every cache method answers while the prefix cache is off.
wire::RpcError no_prefix_cache_error();

// The prompt as token ids: text encoded, ids checked against the vocabulary;
// an empty prompt is refused.
std::expected<std::vector<int>, wire::RpcError> cache_prompt_tokens(EngineAccess& e,
                                                                    const wire::Prompt& prompt);

// How many of the prompt's tokens are cached and in which tier, looking at
// the full blocks admission would match: (len - 1) / page_size of them, the
// last token always being fed.
std::expected<nlohmann::json, wire::RpcError> cache_lookup(EngineAccess& e,
                                                           const wire::CachePromptParams& params);

// Pins (delta +1) or unpins (-1) the cached prefix of the prompt.
std::expected<nlohmann::json, wire::RpcError> cache_pin(EngineAccess& e,
                                                        const wire::CachePromptParams& params,
                                                        int delta);

// KvCache::summarize(), the largest families' first tokens decoded.
std::expected<nlohmann::json, wire::RpcError> cache_tree(EngineAccess& e);

// Drops what the tiers allow, in the order given; blocks dropped per tier.
std::expected<nlohmann::json, wire::RpcError> cache_flush(EngineAccess& e,
                                                          const std::vector<Tier>& tiers);

}  // namespace kvtier::daemon

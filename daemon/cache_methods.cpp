#include "daemon/cache_methods.h"

#include <cstdio>

#include "tiers/block_key.h"

namespace kvtier::daemon {

using wire::CachePromptParams;
using wire::Prompt;
using wire::prompt_tokens;
using wire::RpcError;
namespace rpc_code = wire::rpc_code;

using nlohmann::json;

namespace {

json tier_to_json(const TierStats& t) {
  json out = {{"capacity_blocks", t.capacity_blocks},
              {"used_blocks", t.used_blocks},
              {"hits", t.hits},
              {"demotions", t.demotions},
              {"promotions", t.promotions},
              {"bytes_in", t.bytes_in},
              {"bytes_out", t.bytes_out},
              {"bytes_skipped", t.bytes_skipped},
              {"dropped", t.dropped},
              {"checksum_failures", t.checksum_failures},
              {"io_errors", t.io_errors},
              {"available", t.available},
              {"transfers", t.transfer.count},
              {"transfer_mean_us", t.transfer.mean_us},
              {"transfer_p99_us", t.transfer.p99_us},
              {"format", std::string(to_string(t.format))},
              {"block_bytes", t.block_bytes},
              {"slot_bytes", t.slot_bytes}};
  if (!t.nodes.empty()) {
    json nodes = json::array();
    for (const tiers::NodeHealth& n : t.nodes)
      nodes.push_back({{"address", n.address},
                       {"available", n.available},
                       {"breaker_opened", n.breaker_opened},
                       {"last_error", n.last_error}});
    out["nodes"] = std::move(nodes);
  }
  return out;
}

KvCache* cache_of(EngineAccess& e) { return e.scheduler.cache(); }

}  // namespace

json tier_table_to_json(const CacheStats& stats) {
  json out = json::object();
  for (int t = 0; t < kNumTiers; ++t)
    out[to_string(static_cast<Tier>(t))] = tier_to_json(stats.tier[t]);
  return out;
}

json tier_costs_to_json(const TierCosts& costs) {
  json curve = json::array();
  for (const PassCost& p : costs.prefill)
    curve.push_back({{"rows", p.rows}, {"pass_us", p.seconds * 1e6}, {"samples", p.samples}});
  json out = {{"prefill", std::move(curve)}};
  json samples = {{"prefill", costs.prefill_samples()}};
  for (int t = 1; t < kNumTiers; ++t) {  // L1 has nothing to load
    const std::string name = to_string(static_cast<Tier>(t));
    out[name + "_latency_us"] = costs.load[t].latency_s * 1e6;
    out[name + "_per_block_us"] = costs.load[t].per_block_s * 1e6;
    samples[name] = costs.load[t].samples;
  }
  out["samples"] = std::move(samples);
  return out;
}

json tiers_to_json(const CacheStats& stats, const RequestMetrics& requests) {
  json ttft = json::object();
  for (int source = 0; source <= RequestMetrics::kComputed; ++source) {
    const util::LatencyHistogram& h = requests.ttft_by_source[source];
    ttft[prompt_source_name(source)] = {{"requests", h.count},
                                        {"mean_ms", h.count ? 1e3 * h.sum_seconds / h.count : 0.0}};
  }
  return {{"tiers", tier_table_to_json(stats)},
          {"missed_blocks", stats.missed_blocks},
          {"costs", tier_costs_to_json(stats.costs)},
          {"ttft_by_source", std::move(ttft)}};
}

json cache_stats_to_json(const CacheStats& stats) {
  return {{"tiers", tier_table_to_json(stats)},
          {"lookups", stats.lookups},
          {"missed_blocks", stats.missed_blocks},
          {"recompute_tokens_avoided", stats.recompute_tokens_avoided},
          {"skipped_loads", stats.skipped_loads},
          {"cleaned", stats.cleaned},
          {"nodes", stats.nodes},
          {"costs", tier_costs_to_json(stats.costs)}};
}

json cache_snapshot_to_json(const EngineLoop::CacheSnapshot& snapshot) {
  char fingerprint[17];
  std::snprintf(fingerprint, sizeof fingerprint, "%016llx",
                static_cast<unsigned long long>(snapshot.fingerprint));
  json blocks = json::array();
  for (const BlockEvent& b : snapshot.blocks)
    blocks.push_back({{"block", tiers::to_hex(b.key)}, {"tier", to_string(b.tier)}});
  return {{"seq", snapshot.seq},
          {"fingerprint", fingerprint},
          {"page_size", snapshot.page_size},
          {"blocks", std::move(blocks)}};
}

json cache_events_to_json(const EngineLoop::CacheEvents& batch) {
  json events = json::array();
  for (const BlockEvent& e : *batch.events)
    events.push_back(
        {{"block", tiers::to_hex(e.key)}, {"tier", to_string(e.tier)}, {"stored", e.stored}});
  return {{"seq", batch.seq}, {"events", std::move(events)}};
}

RpcError no_prefix_cache_error() {
  return {rpc_code::kNoPrefixCache, "the prefix cache is off (start kvtierd with --prefix-cache)"};
}

std::expected<std::vector<int>, RpcError> cache_prompt_tokens(EngineAccess& e,
                                                              const Prompt& prompt) {
  auto encoded = prompt_tokens(e.tokenizer, prompt);
  if (!encoded) return std::unexpected(RpcError{rpc_code::kInvalidParams, encoded.error()});
  std::vector<int> tokens = std::move(*encoded);
  if (tokens.empty())
    return std::unexpected(RpcError{rpc_code::kInvalidParams, "the prompt is empty"});
  for (int t : tokens) {
    if (t < 0 || t >= e.model.vocab_size) {
      return std::unexpected(RpcError{
          rpc_code::kInvalidParams, "token " + std::to_string(t) + " is outside the vocabulary (" +
                                        std::to_string(e.model.vocab_size) + " tokens)"});
    }
  }
  return tokens;
}

std::expected<json, RpcError> cache_lookup(EngineAccess& e, const CachePromptParams& params) {
  KvCache* cache = cache_of(e);
  if (!cache) return std::unexpected(no_prefix_cache_error());
  auto tokens = cache_prompt_tokens(e, params.prompt);
  if (!tokens) return std::unexpected(tokens.error());
  const int page = e.scheduler.config().page_size;
  // As admission matches: the last prompt token is always fed (its logits
  // pick the first token), so a block holding it is never served.
  const int max_blocks = (static_cast<int>(tokens->size()) - 1) / page;
  const PrefixLookup found = cache->lookup(cache->root(params.cache_salt), *tokens, max_blocks);
  TierCounts cached;
  for (int t = 0; t < kNumTiers; ++t) cached[t] = found.blocks[t] * page;
  return json{{"prompt_tokens", tokens->size()},
              {"cacheable_tokens", max_blocks * page},
              {"cached_tokens", found.total_blocks() * page},
              {"tiers", per_tier_to_json(cached)},
              {"blocks", per_tier_to_json(found.blocks)}};
}

std::expected<json, RpcError> cache_pin(EngineAccess& e, const CachePromptParams& params,
                                        int delta) {
  KvCache* cache = cache_of(e);
  if (!cache) return std::unexpected(no_prefix_cache_error());
  auto tokens = cache_prompt_tokens(e, params.prompt);
  if (!tokens) return std::unexpected(tokens.error());
  const int changed = cache->pin(cache->root(params.cache_salt), *tokens, delta);
  return json{{"blocks", changed}, {"tokens", changed * e.scheduler.config().page_size}};
}

std::expected<json, RpcError> cache_tree(EngineAccess& e) {
  KvCache* cache = cache_of(e);
  if (!cache) return std::unexpected(no_prefix_cache_error());
  const TreeSummary s = cache->summarize();
  json families = json::array();
  for (const TreeSummary::Family& f : s.largest) {
    families.push_back({{"first_key", f.first_key},
                        {"first_tokens", f.first_tokens},
                        {"first_text", e.tokenizer.decode(f.first_tokens)},
                        {"nodes", f.nodes},
                        {"depth", f.depth},
                        {"blocks", per_tier_to_json(f.blocks)}});
  }
  return json{{"nodes", s.nodes},         {"blocks", per_tier_to_json(s.blocks)},
              {"leaves", s.leaves},       {"max_depth", s.max_depth},
              {"pinned", s.pinned},       {"held", s.held},
              {"in_flight", s.in_flight}, {"largest", std::move(families)}};
}

std::expected<json, RpcError> cache_flush(EngineAccess& e, const std::vector<Tier>& tiers) {
  KvCache* cache = cache_of(e);
  if (!cache) return std::unexpected(no_prefix_cache_error());
  // Blocks with L3 writes in flight cannot be dropped; waiting for them (a
  // few milliseconds, on an operator's request) makes the flush complete.
  cache->drain();
  TierCounts dropped;
  for (Tier t : tiers) dropped[t] += cache->flush(t);
  return json{{"dropped", per_tier_to_json(dropped)}};
}

}  // namespace kvtier::daemon

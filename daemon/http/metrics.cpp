// GET /metrics: the daemon's figures in Prometheus's text format
// (docs/http.md lists every family). Names follow Prometheus's conventions:
// the kvtier_ prefix, _total on counters, base units in the name (_seconds,
// _bytes, _blocks, _tokens). Counters count from the daemon's start.
#include <unistd.h>

#include <fstream>

#include "daemon/control.h"
#include "daemon/http/routes.h"
#include "engine/build_info.h"
#include "wire/http/prometheus_text.h"

namespace kvtier::daemon::http {

using wire::http::Exchange;
using wire::http::PrometheusText;
using wire::http::Request;
using wire::http::Response;

namespace {

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * ::sysconf(_SC_PAGESIZE);
}

void request_metrics(PrometheusText& m, const EngineStats& s) {
  const SchedulerStats& q = s.scheduler;
  m.family("kvtier_requests_waiting", "gauge", "Requests queued for admission");
  m.sample("kvtier_requests_waiting", q.waiting);
  m.family("kvtier_requests_running", "gauge", "Requests admitted: prefilling or decoding");
  m.sample("kvtier_requests_running", q.running + q.prefilling);
  m.family("kvtier_requests_pending", "gauge", "Requests submitted and not yet final");
  m.sample("kvtier_requests_pending", s.pending);
  m.family("kvtier_requests_submitted_total", "counter", "Requests submitted");
  m.sample("kvtier_requests_submitted_total", static_cast<double>(s.submitted));
  m.family("kvtier_requests_finished_total", "counter",
           "Requests finished, by finish reason (length, stop, context, cancelled)");
  for (const char* reason : {"length", "stop", "context", "cancelled"}) {
    auto it = s.requests.finished.find(reason);
    m.sample("kvtier_requests_finished_total", {{"finish_reason", reason}},
             it == s.requests.finished.end() ? 0.0 : static_cast<double>(it->second));
  }
  m.family("kvtier_requests_failed_total", "counter",
           "Requests refused by validation or failed by the engine");
  m.sample("kvtier_requests_failed_total", static_cast<double>(s.failed));

  const RequestMetrics& r = s.requests;
  m.family("kvtier_request_queue_seconds", "histogram", "Submit to admission");
  m.histogram("kvtier_request_queue_seconds", {}, r.queue);
  m.family("kvtier_time_to_first_token_seconds", "histogram", "Submit to the first token");
  m.histogram("kvtier_time_to_first_token_seconds", {}, r.ttft);
  m.family("kvtier_time_to_first_token_by_source_seconds", "histogram",
           "Submit to the first token, by where most of the prompt came from "
           "(l1, l2, l3, remote, computed)");
  for (int source = 0; source <= RequestMetrics::kComputed; ++source)
    m.histogram("kvtier_time_to_first_token_by_source_seconds",
                {{"source", prompt_source_name(source)}}, r.ttft_by_source[source]);
  m.family("kvtier_inter_token_latency_seconds", "histogram",
           "Between consecutive tokens of a sample");
  m.histogram("kvtier_inter_token_latency_seconds", {}, r.inter_token);
  m.family("kvtier_request_duration_seconds", "histogram", "Submit to the final answer");
  m.histogram("kvtier_request_duration_seconds", {}, r.e2e);

  m.family("kvtier_generation_tokens_total", "counter", "Tokens generated, every sample");
  m.sample("kvtier_generation_tokens_total", static_cast<double>(s.tokens_generated));
  m.family("kvtier_prompt_tokens_total", "counter", "Prompt tokens of finished requests");
  m.sample("kvtier_prompt_tokens_total", static_cast<double>(r.prompt_tokens));
  m.family("kvtier_prompt_tokens_cached_total", "counter",
           "Prompt tokens of finished requests served from the prefix cache, by tier");
  for (int t = 0; t < kNumTiers; ++t)
    m.sample("kvtier_prompt_tokens_cached_total", {{"tier", to_string(static_cast<Tier>(t))}},
             static_cast<double>(r.cached_tokens[t]));
  m.family("kvtier_prompt_tokens_computed_total", "counter",
           "Prompt tokens of finished requests no tier had: prefilled");
  m.sample("kvtier_prompt_tokens_computed_total",
           static_cast<double>(r.prompt_tokens - r.cached_tokens.total()));
  m.family("kvtier_recomputed_tokens_total", "counter",
           "Positions computed again after a preemption");
  m.sample("kvtier_recomputed_tokens_total", static_cast<double>(q.recomputed_tokens));
  m.family("kvtier_preemptions_total", "counter", "Requests preempted (swapped or recomputed)");
  m.sample("kvtier_preemptions_total", static_cast<double>(q.preemptions));
  m.family("kvtier_kv_blocks_used", "gauge", "KV blocks held by admitted requests");
  m.sample("kvtier_kv_blocks_used", q.blocks_used);
  m.family("kvtier_kv_blocks_free", "gauge", "KV blocks still available within max_kv_tokens");
  m.sample("kvtier_kv_blocks_free", q.blocks_free);
}

void tier_metrics(PrometheusText& m, const CacheStats& c) {
  const auto each = [&](std::string_view name, std::string_view type, std::string_view help,
                        auto value) {
    m.family(name, type, help);
    for (int t = 0; t < kNumTiers; ++t) {
      const TierStats& s = c.tier[t];
      m.sample(name, {{"tier", to_string(static_cast<Tier>(t))}}, static_cast<double>(value(s)));
    }
  };
  each("kvtier_tier_capacity_blocks", "gauge", "Blocks a tier can hold (remote: 0, Redis's own)",
       [](const TierStats& s) { return s.capacity_blocks; });
  each("kvtier_tier_used_blocks", "gauge", "Blocks a tier holds",
       [](const TierStats& s) { return s.used_blocks; });
  each("kvtier_tier_capacity_bytes", "gauge", "Bytes of blocks a tier can hold",
       [](const TierStats& s) { return s.capacity_blocks * s.block_bytes; });
  each("kvtier_tier_used_bytes", "gauge", "Bytes of the blocks a tier holds",
       [](const TierStats& s) { return s.used_blocks * s.block_bytes; });
  each("kvtier_tier_hits_total", "counter", "Blocks handed to requests from a tier",
       [](const TierStats& s) { return s.hits; });
  each("kvtier_tier_demotions_total", "counter", "Blocks moved into a tier from above",
       [](const TierStats& s) { return s.demotions; });
  each("kvtier_tier_promotions_total", "counter", "Blocks moved up out of a tier",
       [](const TierStats& s) { return s.promotions; });
  each("kvtier_tier_received_bytes_total", "counter", "Bytes moved into a tier",
       [](const TierStats& s) { return s.bytes_in; });
  each("kvtier_tier_sent_bytes_total", "counter", "Bytes moved out of a tier",
       [](const TierStats& s) { return s.bytes_out; });
  each("kvtier_tier_skipped_bytes_total", "counter",
       "Bytes promotions left in a tier: layers no query would read (sliding windows)",
       [](const TierStats& s) { return s.bytes_skipped; });
  each("kvtier_tier_dropped_blocks_total", "counter", "Blocks that left the cache from a tier",
       [](const TierStats& s) { return s.dropped; });
  each("kvtier_tier_checksum_failures_total", "counter",
       "Blocks whose checksum or authentication failed (never used)",
       [](const TierStats& s) { return s.checksum_failures; });
  each("kvtier_tier_io_errors_total", "counter", "Failed reads and writes of a tier",
       [](const TierStats& s) { return s.io_errors; });
  each("kvtier_tier_available", "gauge", "1 while a tier can be used (its breaker closed)",
       [](const TierStats& s) { return s.available ? 1 : 0; });
  m.family("kvtier_tier_transfer_seconds", "histogram",
           "Block moves into or out of a tier (demotions, promotions)");
  for (int t = 0; t < kNumTiers; ++t)
    m.histogram("kvtier_tier_transfer_seconds", {{"tier", to_string(static_cast<Tier>(t))}},
                c.tier[t].transfer.histogram);
  // The nodes of every store tier that has them (a networked one: the
  // remote tier's Redis nodes), under the names the dashboards know.
  std::vector<tiers::NodeHealth> nodes;
  for (const TierStats& t : c.tier) nodes.insert(nodes.end(), t.nodes.begin(), t.nodes.end());
  m.family("kvtier_remote_node_up", "gauge",
           "1 while a Redis node's circuit breaker is closed, by address");
  for (const auto& n : nodes)
    m.sample("kvtier_remote_node_up", {{"address", n.address}}, n.available);
  m.family("kvtier_remote_node_breaker_opened_total", "counter",
           "Times a Redis node's circuit breaker opened");
  for (const auto& n : nodes)
    m.sample("kvtier_remote_node_breaker_opened_total", {{"address", n.address}},
             static_cast<double>(n.breaker_opened));
  m.family("kvtier_cache_missed_blocks_total", "counter", "Full prompt blocks no tier had");
  m.sample("kvtier_cache_missed_blocks_total", static_cast<double>(c.missed_blocks));
  m.family("kvtier_cache_lookups_total", "counter",
           "Admissions that took their prefix from the cache");
  m.sample("kvtier_cache_lookups_total", static_cast<double>(c.lookups));
  m.family("kvtier_cache_skipped_loads_total", "counter",
           "Cached blocks recomputed because that was cheaper than loading them");
  m.sample("kvtier_cache_skipped_loads_total", static_cast<double>(c.skipped_loads));
  m.family("kvtier_cache_nodes", "gauge", "Blocks in the radix tree");
  m.sample("kvtier_cache_nodes", static_cast<double>(c.nodes));
}

void daemon_metrics(PrometheusText& m, Context& context) {
  m.family("kvtier_build_info", "gauge", "The version, git revision and device of this kvtierd");
  m.sample("kvtier_build_info",
           {{"version", std::string(version())},
            {"revision", std::string(git_revision())},
            {"device", context.engine.device()}},
           1);
  m.family("kvtier_uptime_seconds", "gauge", "Seconds since the daemon started");
  m.sample(
      "kvtier_uptime_seconds",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - context.started).count());
  m.family("kvtier_resident_memory_bytes", "gauge", "The daemon's resident memory (RSS)");
  m.sample("kvtier_resident_memory_bytes", static_cast<double>(resident_bytes()));
  m.family("kvtier_connections", "gauge", "Client connections open, JSON-RPC and HTTP");
  m.sample("kvtier_connections", context.control.connections());
  m.family("kvtier_http_responses_total", "counter", "HTTP answers, by route and status code");
  for (const auto& [key, n] : context.counts.answers)
    m.sample("kvtier_http_responses_total",
             {{"route", key.first}, {"code", std::to_string(key.second)}}, static_cast<double>(n));
}

}  // namespace

void metrics(const Request&, const std::shared_ptr<Exchange>& exchange, Context& context) {
  context.engine.stats([exchange, &context](EngineStats s) {  // on the engine thread
    exchange->post([exchange, &context, s = std::move(s)] {
      PrometheusText m;
      daemon_metrics(m, context);
      request_metrics(m, s);
      if (s.cache) tier_metrics(m, *s.cache);
      Response r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = m.text();
      exchange->respond(std::move(r));
    });
  });
}

}  // namespace kvtier::daemon::http

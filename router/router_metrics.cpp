#include "router/router_metrics.h"

#include "engine/build_info.h"
#include "wire/http/prometheus_text.h"

namespace kvtier::router {

using nlohmann::json;
using wire::http::PrometheusText;

namespace {

double number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// One labelled sample per key of `by` (an object of numbers).
void samples_by(PrometheusText& m, const char* name, const char* label, const json& by,
                PrometheusText::Labels more = {}) {
  if (!by.is_object()) return;
  for (const auto& [key, value] : by.items()) {
    if (!value.is_number()) continue;
    PrometheusText::Labels labels = more;
    labels.emplace_back(label, key);
    m.sample(name, labels, value.get<double>());
  }
}

}  // namespace

std::string router_metrics_text(const Router& router,
                                const std::map<std::pair<std::string, int>, long>& http_answers,
                                int connections) {
  const json fleet = router.fleet();
  PrometheusText m;
  m.family("kvtier_router_build_info", "gauge", "The version and git revision of this router");
  m.sample("kvtier_router_build_info",
           {{"version", std::string(version())}, {"revision", std::string(git_revision())}}, 1);
  m.family("kvtier_router_connections", "gauge", "Client connections open, JSON-RPC and HTTP");
  m.sample("kvtier_router_connections", connections);

  const json& choices = fleet["choices"];
  m.family("kvtier_router_choices_total", "counter",
           "Requests routed, by reason: prefix (held there), load, cold, or unrouted (no daemon "
           "usable)");
  for (const char* reason : {"prefix", "load", "cold", "unrouted"})
    m.sample("kvtier_router_choices_total", {{"reason", reason}}, number(choices, reason));
  m.family("kvtier_router_retries_total", "counter",
           "Requests sent to another daemon after one went away or refused them for now");
  m.sample("kvtier_router_retries_total", number(choices, "retried"));
  m.family("kvtier_router_routed_blocks_total", "counter",
           "Prompt blocks the chosen daemon held when routed, by its fastest tier holding each");
  samples_by(m, "kvtier_router_routed_blocks_total", "tier", fleet["routed_blocks"]);
  m.family("kvtier_router_cached_tokens_total", "counter",
           "Prompt tokens the daemons served from their cache, by tier, as their answers report");
  samples_by(m, "kvtier_router_cached_tokens_total", "tier", fleet["cached_tokens"]);
  m.family("kvtier_router_requests", "gauge", "JSON-RPC requests in flight through the router");
  m.sample("kvtier_router_requests", number(fleet, "requests"));

  const json& daemons = fleet["daemons"];
  const auto per_daemon = [&](const char* name, const char* type, const char* help,
                              const char* key) {
    m.family(name, type, help);
    for (const json& d : daemons) {
      const json& v = d[key];
      m.sample(name, {{"daemon", d.value("address", std::string())}},
               v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : number(d, key));
    }
  };
  per_daemon("kvtier_router_daemon_usable", "gauge",
             "Whether the router sends requests to this daemon (1) or not (0)", "usable");
  per_daemon("kvtier_router_daemon_pending", "gauge",
             "Requests queued and running on this daemon, as the router counts them", "pending");
  per_daemon("kvtier_router_daemon_backlog_rows", "gauge",
             "Rows this daemon's passes hold before a new request's own, as the router counts them",
             "backlog_rows");
  per_daemon("kvtier_router_daemon_routed_total", "counter",
             "Requests the router sent to this daemon (a retry counts on each)", "routed");
  m.family("kvtier_router_daemon_blocks", "gauge",
           "Blocks the router's index of this daemon holds, by fastest tier");
  for (const json& d : daemons)
    samples_by(m, "kvtier_router_daemon_blocks", "tier", d["blocks"],
               {{"daemon", d.value("address", std::string())}});
  per_daemon("kvtier_router_daemon_downs_total", "counter",
             "Times this daemon was taken out of use", "downs");
  per_daemon("kvtier_router_daemon_resyncs_total", "counter",
             "Fresh snapshots of this daemon's cache after a gap in its events", "resyncs");

  m.family("kvtier_router_http_responses_total", "counter",
           "HTTP answers, by route and status code");
  for (const auto& [key, n] : http_answers)
    m.sample("kvtier_router_http_responses_total",
             {{"route", key.first}, {"code", std::to_string(key.second)}}, static_cast<double>(n));
  return m.text();
}

}  // namespace kvtier::router

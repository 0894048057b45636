// kvtier-router's GET /metrics, in Prometheus's text format
// (wire/http/prometheus_text.h), every figure from Router::fleet() (the
// `fleet` method's answer, so the two never disagree):
//
//   kvtier_router_build_info{version,revision}         gauge, 1
//   kvtier_router_connections                          gauge
//   kvtier_router_choices_total{reason}                prefix | load | cold | unrouted
//   kvtier_router_retries_total                        requests sent to a second daemon
//   kvtier_router_routed_blocks_total{tier}            prompt blocks the chosen daemon held
//   kvtier_router_cached_tokens_total{tier}            prompt tokens the daemons served
//                                                      from cache (their answers' usage)
//   kvtier_router_requests                             gauge, JSON-RPC requests in flight
//   kvtier_router_daemon_usable{daemon}                gauge, 1 or 0
//   kvtier_router_daemon_pending{daemon}               gauge, queued and running there
//   kvtier_router_daemon_blocks{daemon,tier}           gauge, blocks its index holds
//   kvtier_router_daemon_downs_total{daemon}           times it was taken out of use
//   kvtier_router_daemon_resyncs_total{daemon}         fresh snapshots of its cache
//   kvtier_router_http_responses_total{route,code}     HTTP answers
//
// `daemon` is the daemon's socket path, as given by --daemon.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "router/router.h"

namespace kvtier::router {

std::string router_metrics_text(const Router& router,
                                const std::map<std::pair<std::string, int>, long>& http_answers,
                                int connections);

}  // namespace kvtier::router

// What kvtierd's HTTP routes (routes.h) may use beside their exchange
// (wire/http/exchange.h): the engine, the daemon's control, the model's
// chat format and the answer counts for /metrics.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "daemon/engine_loop.h"
#include "wire/chat_template.h"

namespace kvtier::daemon {
class DaemonControl;
}  // namespace kvtier::daemon

namespace kvtier::daemon::http {

// Answers by route (a route's path, or "other") and status, for /metrics.
struct HttpCounts {
  std::map<std::pair<std::string, int>, long> answers;
};

// What every route may use beside its exchange; outlives every connection.
// io thread only.
struct Context {
  EngineLoop& engine;
  DaemonControl& control;
  const wire::ChatTemplate& chat_template;  // the model's (wire/chat_template.h)
  HttpCounts& counts;
  std::chrono::steady_clock::time_point started;  // the daemon's start, for its uptime
};

}  // namespace kvtier::daemon::http

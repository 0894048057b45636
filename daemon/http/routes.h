// The HTTP API's routes (docs/http.md): one row per endpoint, each
// endpoint's handler in a file of its own beside this one. A request whose
// path no row has gets 404, one whose path is there under another method
// 405; both as OpenAI error objects (errors.h).
#pragma once

#include <memory>
#include <span>

#include "daemon/http/exchange.h"

namespace kvtier::daemon::http {

using Handler = void (*)(const Request& request, const std::shared_ptr<Exchange>& exchange,
                         Context& context);

struct Route {
  const char* method;
  const char* path;
  Handler handler;
};

std::span<const Route> routes();

// The route `path` is, or "other": a label of bounded cardinality.
std::string_view route_label(std::string_view path);

// Answers `request` through its route.
void dispatch(const Request& request, const std::shared_ptr<Exchange>& exchange, Context& context);

// The handlers, one file each.
void health(const Request&, const std::shared_ptr<Exchange>&, Context&);       // health.cpp
void list_models(const Request&, const std::shared_ptr<Exchange>&, Context&);  // models.cpp
void completions(const Request&, const std::shared_ptr<Exchange>&, Context&);  // completions.cpp
void chat_completions(const Request&, const std::shared_ptr<Exchange>&,
                      Context&);                                           // chat_completions.cpp
void metrics(const Request&, const std::shared_ptr<Exchange>&, Context&);  // metrics.cpp

}  // namespace kvtier::daemon::http

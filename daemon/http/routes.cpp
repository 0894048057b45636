#include "daemon/http/routes.h"

#include <array>

#include "daemon/control.h"
#include "wire/http/find_route.h"

namespace kvtier::daemon::http {

using wire::RequestOwner;
using wire::http::Exchange;
using wire::http::find_route;
using wire::http::Request;

std::span<const Route> routes() {
  static const std::array<Route, 10> table = {{
      {"GET", "/", &page},
      {"GET", "/page.css", &page},
      {"GET", "/page.js", &page},
      {"GET", "/favicon.svg", &page},
      {"GET", "/health", &health},
      {"GET", "/metrics", &metrics},
      {"GET", "/tiers", &tiers},
      {"GET", "/v1/models", &list_models},
      {"POST", "/v1/completions", &completions},
      {"POST", "/v1/chat/completions", &chat_completions},
  }};
  return table;
}

std::string_view route_label(std::string_view path) {
  for (const Route& route : routes())
    if (path == route.path) return route.path;
  return "other";
}

void dispatch(const Request& request, const std::shared_ptr<Exchange>& exchange, Context& context) {
  if (const Route* route = find_route(routes(), request, *exchange))
    route->handler(request, exchange, context);
}

std::size_t DaemonService::max_body_bytes() const {
  return context_.control.config().max_line_bytes;
}

double DaemonService::request_timeout() const { return context_.control.config().http_timeout; }

void DaemonService::dispatch(const Request& request, const std::shared_ptr<Exchange>& exchange) {
  http::dispatch(request, exchange, context_);
}

void DaemonService::answered(std::string_view path, int status) {
  ++context_.counts.answers[{std::string(route_label(path)), status}];
}

void DaemonService::cancel(RequestId id, const RequestOwner& owner) {
  (void)context_.engine.cancel(id, owner, false);
}

}  // namespace kvtier::daemon::http

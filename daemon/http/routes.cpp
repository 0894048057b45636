#include "daemon/http/routes.h"

#include <array>

#include "daemon/http/errors.h"

namespace kvtier::daemon::http {

std::span<const Route> routes() {
  static const std::array<Route, 5> table = {{
      {"GET", "/health", &health},
      {"GET", "/metrics", &metrics},
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
  bool path_known = false;
  for (const Route& route : routes()) {
    if (request.path() != route.path) continue;
    path_known = true;
    if (request.method == route.method) return route.handler(request, exchange, context);
  }
  const std::string what = request.method + " " + std::string(request.path());
  if (!path_known) return exchange->respond(error_response(404, "no such endpoint: " + what));
  Response r = error_response(405, "method not allowed: " + what);
  for (const Route& route : routes())
    if (request.path() == route.path) r.headers.emplace_back("Allow", route.method);
  exchange->respond(std::move(r));
}

}  // namespace kvtier::daemon::http

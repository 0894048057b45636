// The HTTP API's routes (docs/http.md): one row per endpoint, each
// endpoint's handler in a file of its own beside this one. A request whose
// path no row has gets 404, one whose path is there under another method
// 405; both as OpenAI error objects (errors.h).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "daemon/http/errors.h"
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

// The row of `table` (rows with `method` and `path`) that `request` asks
// for, or nullptr after answering 404 (no row has its path) or 405 (rows
// have it under other methods, said in Allow) on `exchange`. kvtierd's
// table and the router's both dispatch through it.
template <class Row>
const Row* find_route(std::span<const Row> table, const Request& request, Exchange& exchange) {
  bool path_known = false;
  for (const Row& row : table) {
    if (request.path() != row.path) continue;
    path_known = true;
    if (request.method == row.method) return &row;
  }
  const std::string what = request.method + " " + std::string(request.path());
  if (!path_known) {
    exchange.respond(error_response(404, "no such endpoint: " + what));
    return nullptr;
  }
  Response r = error_response(405, "method not allowed: " + what);
  for (const Row& row : table)
    if (request.path() == row.path) r.headers.emplace_back("Allow", row.method);
  exchange.respond(std::move(r));
  return nullptr;
}

// kvtierd's HTTP service (exchange.h): these routes over `context`, with
// the daemon's max_line_bytes and http_timeout, answers counted in
// context.counts and abandoned generations cancelled on the engine.
class DaemonService final : public Service {
 public:
  explicit DaemonService(Context& context) : context_(context) {}

  std::size_t max_body_bytes() const override;
  double request_timeout() const override;
  void dispatch(const Request& request, const std::shared_ptr<Exchange>& exchange) override;
  void answered(std::string_view path, int status) override;
  void cancel(RequestId id, const RequestOwner& owner) override;

 private:
  Context& context_;
};

// The handlers, one file each.
void health(const Request&, const std::shared_ptr<Exchange>&, Context&);       // health.cpp
void list_models(const Request&, const std::shared_ptr<Exchange>&, Context&);  // models.cpp
void completions(const Request&, const std::shared_ptr<Exchange>&, Context&);  // completions.cpp
void chat_completions(const Request&, const std::shared_ptr<Exchange>&,
                      Context&);                                           // chat_completions.cpp
void metrics(const Request&, const std::shared_ptr<Exchange>&, Context&);  // metrics.cpp

}  // namespace kvtier::daemon::http

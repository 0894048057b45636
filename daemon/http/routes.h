// The HTTP API's routes (docs/http.md): one row per endpoint, each
// endpoint's handler in a file of its own beside this one. A request whose
// path no row has gets 404, one whose path is there under another method
// 405; both as OpenAI error objects (wire/http/errors.h).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "daemon/http/context.h"
#include "wire/http/exchange.h"

namespace kvtier::daemon::http {

using Handler = void (*)(const wire::http::Request& request,
                         const std::shared_ptr<wire::http::Exchange>& exchange, Context& context);

struct Route {
  const char* method;
  const char* path;
  Handler handler;
};

std::span<const Route> routes();

// The route `path` is, or "other": a label of bounded cardinality.
std::string_view route_label(std::string_view path);

// Answers `request` through its route.
void dispatch(const wire::http::Request& request,
              const std::shared_ptr<wire::http::Exchange>& exchange, Context& context);

// kvtierd's HTTP service (wire/http/exchange.h): these routes over `context`, with
// the daemon's max_line_bytes and http_timeout, answers counted in
// context.counts and abandoned generations cancelled on the engine.
class DaemonService final : public wire::http::Service {
 public:
  explicit DaemonService(Context& context) : context_(context) {}

  std::size_t max_body_bytes() const override;
  double request_timeout() const override;
  void dispatch(const wire::http::Request& request,
                const std::shared_ptr<wire::http::Exchange>& exchange) override;
  void answered(std::string_view path, int status) override;
  void cancel(RequestId id, const wire::RequestOwner& owner) override;

 private:
  Context& context_;
};

// The handlers, one file each.
void health(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
            Context&);  // health.cpp
void list_models(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
                 Context&);  // models.cpp
void completions(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
                 Context&);  // completions.cpp
void chat_completions(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
                      Context&);  // chat_completions.cpp
void metrics(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
             Context&);  // metrics.cpp
void tiers(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
           Context&);  // tiers.cpp
void page(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&,
          Context&);  // page.cpp

}  // namespace kvtier::daemon::http

// kvtier-router's HTTP front door: kvtierd's OpenAI API (docs/http.md), on
// the router's Unix socket (told from JSON-RPC by its first byte, as
// kvtierd does) and on an optional TCP listener (--http-listen, with an API
// key by --http-api-key-file, under kvtierd's http_listen rules). The
// connections are kvtierd's own (wire/http/connection.h: the same
// limits, timeouts and 401s); this is the Service behind them.
//
//   POST /v1/completions, POST /v1/chat/completions
//       Checked first with kvtierd's own parser (completion_params.h), so a
//       request a daemon would refuse gets the same 4xx here, without a
//       daemon. Then routed (Router::route) by its first prompt's tokens
//       (for chat, the conversation as the model's chat template renders
//       it: what the daemon will prefill) and its cache_salt, and passed
//       to that daemon's Unix socket as the client sent it. The answer
//       comes back as the daemon wrote it, a streamed one event by event.
//   GET /v1/models    passed to the first usable daemon.
//   GET /health       the router's own: 200 {"status": "ok"} while a daemon
//                     is usable, 503 {"status": "unavailable"} otherwise,
//                     503 {"status": "draining"} once the router is stopping.
//   GET /metrics      the router's Prometheus metrics (router_metrics.h).
//   GET /fleet        the `fleet` method's answer (Router::fleet): every
//                     daemon, its load and the blocks it holds by tier, and
//                     where the last requests went and why.
//   GET /, /page.css, /page.js, /favicon.svg
//                     the page (web/page_files.h), its fleet view: served
//                     without the API key, as kvtierd serves it.
//
// Retries, as on JSON-RPC (client_session.h): a request whose daemon
// cannot be reached or goes away before its answer began, or that it
// refuses for now (429 full, 503 draining), is sent to another daemon,
// each at most once; the last refusal comes back when none is left. With
// no daemon usable: 503. A daemon that goes away mid-stream ends the
// stream with an {"error": ...} event (OpenAI's clients raise it). A client
// that goes away closes its request's daemon connection, which cancels the
// generation there. While the router drains (router_server.h), a new
// generation gets 503, as a draining kvtierd answers.
//
// Thread-safety: the router's io thread only.
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "router/http_upstream.h"
#include "router/router.h"
#include "wire/http/exchange.h"
#include "wire/http/generation_spec.h"

namespace kvtier::router {

struct HttpFrontOptions {
  std::size_t max_body_bytes = 1 << 20;  // --max-line-bytes, as kvtierd's max_line_bytes
  double request_timeout = 30;           // --http-timeout, as kvtierd's http_timeout
  std::string served_model;              // the model folder's name (openai.h)
};

class HttpFront final : public wire::http::Service {
 public:
  HttpFront(asio::io_context& io, Router& router, HttpFrontOptions options);
  ~HttpFront() override;

  // Client connections open, JSON-RPC and HTTP, for /metrics (set by the
  // server).
  std::function<int()> connections;

  // daemon::http::Service.
  std::size_t max_body_bytes() const override { return options_.max_body_bytes; }
  double request_timeout() const override { return options_.request_timeout; }
  void dispatch(const wire::http::Request& request,
                const std::shared_ptr<wire::http::Exchange>& exchange) override;
  void answered(std::string_view path, int status) override;
  void cancel(RequestId id, const wire::RequestOwner& owner) override;

  // The router stops (its drain ended): each request still on a daemon is
  // answered now, 503 or, once its stream has begun, an {"error": ...}
  // event and the stream's end; its daemon connection closes, which
  // cancels it there. The connections then flush and close (their stop()).
  void stop();

 private:
  struct Forward;
  using Handler = void (HttpFront::*)(const wire::http::Request&,
                                      const std::shared_ptr<wire::http::Exchange>&);
  struct Route {
    const char* method;
    const char* path;
    Handler handler;
  };
  static std::span<const Route> routes();

  void health(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  void metrics(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  void fleet(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  void page(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  void models(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  void completions(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  void chat(const wire::http::Request&, const std::shared_ptr<wire::http::Exchange>&);
  // Both: checked with kvtierd's parser for `api`, then send().
  void generation(const wire::http::Request& request,
                  const std::shared_ptr<wire::http::Exchange>& exchange, wire::http::Api api);

  // Sends `f` to the daemon the router chooses among those it has not been
  // tried on, or answers the last refusal or 503 when none is left.
  void send(const std::shared_ptr<Forward>& f);
  // `f`'s request on its daemon is over (answered, failed or cancelled).
  void left(Forward& f);

  asio::io_context& io_;
  Router& router_;
  HttpFrontOptions options_;
  std::unordered_map<RequestId, std::shared_ptr<Forward>> in_flight_;
  RequestId next_id_ = 1;
  std::map<std::pair<std::string, int>, long> answers_;  // by route label and status
};

}  // namespace kvtier::router

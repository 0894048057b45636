#include "router/http_front.h"

#include <array>
#include <utility>

#include "router/router_metrics.h"
#include "wire/http/body.h"
#include "wire/http/completion_params.h"
#include "wire/http/errors.h"
#include "wire/http/find_route.h"
#include "wire/http/openai.h"
#include "wire/http/page.h"
#include "wire/log.h"
#include "wire/prompt.h"
#include "wire/protocol.h"

namespace kvtier::router {

using nlohmann::json;
using wire::RequestOwner;
using wire::http::dump;
using wire::http::error_object;
using wire::http::error_response;
using wire::http::Exchange;
using wire::http::find_route;
using wire::http::json_body;
using wire::http::ParamError;
using wire::http::Request;
using wire::http::Response;

// One client request on its way to a daemon, perhaps to a second one.
struct HttpFront::Forward {
  Request request;
  std::shared_ptr<Exchange> exchange;
  std::vector<int> tokens;  // the first prompt's, to route it
  std::string cache_salt;
  std::vector<int> tried;           // daemons it was sent to, the last one current
  std::optional<Response> refusal;  // the last daemon's 429 or 503
  RequestId id = 0;                 // tracked on the exchange while on a daemon
  std::shared_ptr<HttpUpstream> upstream;
  int rows = 0;            // the last route's Route::rows
  bool started = false;    // an event of the answer came back from its daemon
  bool streaming = false;  // the client's answer is an event stream, begun
};

namespace {

// The daemons' usage block, for the router's cached-token counts.
void count_usage(Router& router, std::string_view answer) {
  if (answer.find("\"kvtier_cached_tokens\"") == std::string_view::npos) return;
  auto parsed = wire::json_parse(answer);
  if (!parsed || !parsed->is_object()) return;
  const auto usage = parsed->find("usage");
  if (usage != parsed->end() && usage->is_object())
    router.count_cached(usage->value("kvtier_cached_tokens", json()));
}

}  // namespace

HttpFront::HttpFront(asio::io_context& io, Router& router, HttpFrontOptions options)
    : io_(io), router_(router), options_(std::move(options)) {}

HttpFront::~HttpFront() {
  for (auto& [id, f] : in_flight_) {
    if (!f->upstream) continue;
    f->upstream->close();
    f->upstream.reset();  // it holds f through its handlers
  }
}

std::span<const HttpFront::Route> HttpFront::routes() {
  static const std::array<Route, 10> table = {{
      {"GET", "/", &HttpFront::page},
      {"GET", "/page.css", &HttpFront::page},
      {"GET", "/page.js", &HttpFront::page},
      {"GET", "/favicon.svg", &HttpFront::page},
      {"GET", "/health", &HttpFront::health},
      {"GET", "/metrics", &HttpFront::metrics},
      {"GET", "/fleet", &HttpFront::fleet},
      {"GET", "/v1/models", &HttpFront::models},
      {"POST", "/v1/completions", &HttpFront::completions},
      {"POST", "/v1/chat/completions", &HttpFront::chat},
  }};
  return table;
}

void HttpFront::dispatch(const Request& request, const std::shared_ptr<Exchange>& exchange) {
  if (const Route* route = find_route(routes(), request, *exchange))
    (this->*route->handler)(request, exchange);
}

void HttpFront::answered(std::string_view path, int status) {
  std::string label = "other";
  for (const Route& route : routes())
    if (path == route.path) label = route.path;
  ++answers_[{label, status}];
}

void HttpFront::cancel(RequestId id, const RequestOwner&) {
  const auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  const std::shared_ptr<Forward> f = it->second;
  if (f->upstream) f->upstream->close();  // the daemon cancels the generation of a client gone
  left(*f);
}

void HttpFront::stop() {
  std::vector<std::shared_ptr<Forward>> forwards;
  for (auto& [id, f] : in_flight_) forwards.push_back(f);
  const std::string message = "kvtier-router stopped before the daemon answered whole";
  for (const auto& f : forwards) {
    if (f->upstream) f->upstream->close();
    left(*f);
    if (!f->streaming) {
      f->exchange->respond(error_response(503, message));
    } else {
      f->exchange->stream_event(dump({{"error", error_object(503, message)}}));
      f->exchange->stream_end();
    }
  }
}

void HttpFront::health(const Request&, const std::shared_ptr<Exchange>& exchange) {
  int usable = 0;
  for (int i = 0; i < router_.daemons(); ++i) usable += router_.link(i).usable() ? 1 : 0;
  Response r;
  r.status = usable > 0 && !router_.draining() ? 200 : 503;
  r.body = dump({{"status", router_.draining() ? "draining"
                            : usable > 0       ? "ok"
                                               : "unavailable"},
                 {"daemons", router_.daemons()},
                 {"usable", usable}});
  exchange->respond(std::move(r));
}

void HttpFront::page(const Request& request, const std::shared_ptr<Exchange>& exchange) {
  // The route table names only the page's paths, so the file is there.
  exchange->respond(wire::http::page_response(*web::find_page_file(request.path())));
}

void HttpFront::fleet(const Request&, const std::shared_ptr<Exchange>& exchange) {
  Response r;
  r.body = dump(router_.fleet());
  exchange->respond(std::move(r));
}

void HttpFront::metrics(const Request&, const std::shared_ptr<Exchange>& exchange) {
  Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = router_metrics_text(router_, answers_, connections ? connections() : 0);
  exchange->respond(std::move(r));
}

void HttpFront::models(const Request& request, const std::shared_ptr<Exchange>& exchange) {
  int daemon = -1;
  for (int i = 0; i < router_.daemons() && daemon < 0; ++i)
    if (router_.link(i).usable()) daemon = i;
  if (daemon < 0) return exchange->respond(error_response(503, "no daemon is usable now"));
  const std::string address = router_.link(daemon).address();
  HttpUpstream::start(
      io_, router_.link(daemon).where(), request,
      {.on_response = [exchange](Response r) { exchange->respond(std::move(r)); },
       .on_failed =
           [exchange, address](const std::string& why, bool) {
             exchange->respond(error_response(502, "daemon " + address + ": " + why));
           }});
}

void HttpFront::completions(const Request& request, const std::shared_ptr<Exchange>& exchange) {
  generation(request, exchange, wire::http::Api::kCompletions);
}

void HttpFront::chat(const Request& request, const std::shared_ptr<Exchange>& exchange) {
  generation(request, exchange, wire::http::Api::kChat);
}

void HttpFront::generation(const Request& request, const std::shared_ptr<Exchange>& exchange,
                           wire::http::Api api) {
  if (router_.draining())
    return exchange->respond(error_response(503, "the router is shutting down"));
  auto body = json_body(request);
  if (!body) return exchange->respond(std::move(body.error()));
  const bool chat = api == wire::http::Api::kChat;
  auto spec = chat ? wire::http::chat_spec(*body, options_.served_model, router_.chat_template(),
                                           router_.model().block_size)
                   : wire::http::completion_spec(*body, options_.served_model);
  if (!spec) {
    const ParamError& e = spec.error();
    return exchange->respond(error_response(e.status, e.message, e.param, e.code));
  }
  auto tokens = wire::prompt_tokens(router_.tokenizer(), spec->prompts.front());
  if (!tokens)
    return exchange->respond(error_response(400, tokens.error(), chat ? "messages" : "prompt"));
  auto f = std::make_shared<Forward>();
  f->tokens = std::move(*tokens);
  f->cache_salt = spec->params.cache_salt;
  f->request = request;
  f->exchange = exchange;
  send(f);
}

void HttpFront::send(const std::shared_ptr<Forward>& f) {
  const auto route = router_.route(f->tokens, f->cache_salt, f->tried);
  if (!route) {
    if (f->refusal) return f->exchange->respond(std::move(*f->refusal));
    return f->exchange->respond(
        error_response(503, "no daemon is usable now (" + std::to_string(router_.daemons()) +
                                " configured; `kvtierctl fleet` or GET /metrics says why)"));
  }
  const int daemon = route->daemon;
  f->tried.push_back(daemon);
  f->rows = route->rows;
  f->started = false;
  f->id = next_id_++;
  f->exchange->track(f->id);
  in_flight_.emplace(f->id, f);
  const std::string address = router_.link(daemon).address();
  // Sent elsewhere if another daemon is left to try; false otherwise.
  const auto retry = [this, f] {
    if (static_cast<int>(f->tried.size()) >= router_.daemons()) return false;
    router_.count_retry();
    send(f);
    return true;
  };
  f->upstream = HttpUpstream::start(
      io_, router_.link(daemon).where(), f->request,
      {.on_response =
           [this, f, retry](Response r) {
             left(*f);
             if (r.status == 429 || r.status == 503) {  // full or draining: for now
               f->refusal = r;
               if (retry()) return;
               f->refusal.reset();
             }
             if (r.status == 200) count_usage(router_, r.body);
             f->exchange->respond(std::move(r));
           },
       .on_stream_begin =
           [f] {
             f->streaming = true;
             f->exchange->stream_begin();
           },
       .on_event =
           [this, f](std::string_view data) {
             if (!std::exchange(f->started, true)) router_.link(f->tried.back()).started(f->rows);
             count_usage(router_, data);
             f->exchange->stream_event(data);
           },
       .on_end =
           [this, f] {
             left(*f);
             f->exchange->stream_end();
           },
       .on_failed =
           [this, f, retry, address](const std::string& why, bool delivered) {
             left(*f);
             wire::log_warning("daemon " + address + " failed an HTTP request: " + why);
             if (!delivered && retry()) return;
             const std::string message =
                 "daemon " + address + " went away before answering whole: " + why;
             if (!delivered) return f->exchange->respond(error_response(502, message));
             f->exchange->stream_event(dump({{"error", error_object(502, message)}}));
             f->exchange->stream_end();
           }});
}

void HttpFront::left(Forward& f) {
  f.upstream.reset();  // the upstream holds f through its handlers
  if (in_flight_.erase(f.id) == 0) return;
  f.exchange->untrack(f.id);
  router_.link(f.tried.back()).done(f.started ? 0 : f.rows);
}

}  // namespace kvtier::router

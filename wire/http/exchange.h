// What an HTTP route (daemon/http/routes.h) sees of one request and the connection it
// came on, and how it answers: once and whole (respond), or as a stream of
// server-sent events (stream_begin, stream_event..., stream_end). The
// connection (connection.h) implements it; routes never see Boost.Beast.
//
// Contract: exactly one of respond() or stream_begin() per request; after
// stream_begin(), any number of stream_event() and then one stream_end().
// The connection reads the next request of a keep-alive connection only once
// the answer is complete. Calls after the connection has closed do nothing.
//
// Thread-safety: every method but post() on the connection's io thread.
// post() may be called from any thread (the engine's sinks hop back with it).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/scheduling/request_options.h"
#include "wire/access.h"

namespace kvtier::wire::http {

struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // as sent: "/v1/completions?x=1"
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  // The target without its query string.
  std::string_view path() const;
  // A header's value ("" when absent); `name` lower-case.
  std::string header(const std::string& name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more, e.g. Retry-After
};

class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual void respond(Response response) = 0;
  // A 200 text/event-stream answer, sent chunked.
  virtual void stream_begin() = 0;
  // One event: "data: <data>" and a blank line.
  virtual void stream_event(std::string_view data) = 0;
  virtual void stream_end() = 0;

  // Runs `fn` on the connection's io thread; dropped if the connection is
  // gone by then.
  virtual void post(std::function<void()> fn) = 0;
  // A generation the engine runs for this request: cancelled if the client
  // goes away before untrack(), as on JSON-RPC (daemon/session.h).
  virtual void track(RequestId id) = 0;
  virtual void untrack(RequestId id) = 0;
  // Who submits this connection's requests (for cancel_allowed).
  virtual RequestOwner owner() const = 0;
};

// What a connection (connection.h) needs of the program behind it: the
// limits it reads requests under, the answer to each whole request, a count
// of every answer (for /metrics), and the cancel of a request whose client
// went away. kvtierd's routes are one (daemon/http/routes.h, DaemonService), the
// router's front door another (router/http_front.h).
//
// Thread-safety: the connection's io thread.
class Service {
 public:
  virtual ~Service() = default;

  // The longest request body (413 beyond): max_line_bytes.
  virtual std::size_t max_body_bytes() const = 0;
  // Seconds a request has to arrive whole, and an idle keep-alive
  // connection to live: http_timeout.
  virtual double request_timeout() const = 0;
  // Answers `request`, once (the Exchange contract above).
  virtual void dispatch(const Request& request, const std::shared_ptr<Exchange>& exchange) = 0;
  // An answer with `status` to a request for `path` was sent (or a request
  // refused before dispatch: path empty).
  virtual void answered(std::string_view path, int status) = 0;
  // A request the exchange tracked when its client closed the connection.
  virtual void cancel(RequestId id, const RequestOwner& owner) = 0;
};

}  // namespace kvtier::wire::http

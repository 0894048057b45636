// One HTTP request passed to a daemon (its Unix socket or TCP listener), and its answer read
// back as it arrives: whole (an answer with a Content-Length), or event by
// event (a text/event-stream answer, which kvtierd sends chunked, one
// "data: ..." event a chunk or more). The router's HTTP front door
// (http_front.h) relays what it reads.
//
// One connection per request, closed after the answer ("Connection:
// close"): a connect on a Unix socket costs microseconds, and closing it is
// how a request is cancelled on the daemon (kvtierd cancels the
// generations of a client that goes away).
//
// Exactly one of the handlers ends a request: on_response, on_end or
// on_failed; none is called after close(). `delivered` in on_failed says
// whether on_stream_begin had been called, so the caller knows whether the
// request may be sent elsewhere.
//
// Thread-safety: the io thread only.
#pragma once

#include <boost/asio.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "router/daemon_address.h"
#include "wire/http/exchange.h"

namespace kvtier::router {

namespace asio = boost::asio;

class HttpUpstream : public std::enable_shared_from_this<HttpUpstream> {
 public:
  // A whole answer longer than this is a failure (a streamed one has no
  // bound: it ends when the generation does).
  static constexpr std::size_t kMaxBodyBytes = 64 << 20;

  struct Handlers {
    std::function<void(wire::http::Response)> on_response{};  // a whole answer
    std::function<void()> on_stream_begin{};                  // a 200 event stream begins
    std::function<void(std::string_view data)> on_event{};    // one event's data
    std::function<void()> on_end{};                           // the stream ended
    std::function<void(const std::string& why, bool delivered)> on_failed{};
  };

  // Sends `request` (method, target, Content-Type and body; the rest of the
  // client's headers stay with the router; on TCP the daemon's API key as a
  // Bearer token) to the daemon at `address`.
  static std::shared_ptr<HttpUpstream> start(asio::io_context& io, const DaemonAddress& address,
                                             const wire::http::Request& request, Handlers handlers);

  // Closes the connection; no handler is called after. Idempotent.
  void close();

  HttpUpstream(asio::io_context& io, Handlers handlers);

 private:
  struct Impl;
  void begin(const DaemonAddress& address, const wire::http::Request& request);
  void read_head();
  void read_body();
  void read_stream();
  // Takes the complete events out of events_.
  void split_events();
  void fail(const std::string& why);

  std::shared_ptr<Impl> impl_;
  Handlers handlers_;
  std::string events_;  // stream bytes not yet split into events
  bool streaming_ = false;
  bool closed_ = false;
};

}  // namespace kvtier::router

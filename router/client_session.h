// One client connection to the router, speaking kvtierd's protocol
// (docs/protocol.md): each `generate`, `cache.lookup` and `cache.warm` goes
// to the daemon Router::route chooses, and its answer and streamed
// notifications come back as the daemon wrote them, but for two ids:
//  - the JSON-RPC id is the client's own (the router numbers its calls to a
//    daemon itself, so clients' ids never collide there);
//  - the request id (`result.id`, `generate.token`'s `params.id`) is the
//    router's (Router::request_begin), which `cancel` takes.
//
// Validation happens here first, with kvtierd's own parser and messages
// (protocol.h), so a bad request is refused the same way without a daemon;
// what needs the model's weights (vocabulary, context, KV budget) is the
// daemon's, and its error comes back unchanged.
//
// Upstream: one connection per daemon this session has used, opened on
// first use; closing the session closes them, which cancels the session's
// requests on the daemons (as closing a daemon connection does).
//
// While the router drains (router_server.h), a new routed call gets
// kShuttingDown, as a draining kvtierd answers; those in flight go on.
//
// A daemon connection that breaks: each request on it that had streamed
// nothing yet is sent again to another daemon (at most every daemon once);
// the others, and those with no daemon left, get kDaemonLost. A request a
// daemon refuses for now (kTooManyPending, kShuttingDown: full, or draining
// for a restart) is sent to another the same way; the last refusal comes
// back as the daemon wrote it.
//
// The router answers `health`, `fleet`, `fleet.route`, `cancel`, `shutdown`
// (the router's uid and root only; the daemons go on) and `help` itself
// (methods()); other methods
// (stats, tiers, config.*, cache.tree, cache.flush, cache.pin, cache.unpin,
// cache.subscribe) are a daemon's own and get kMethodNotFound saying so:
// ask the daemon.
//
// On the router's TCP listener (--http-listen) with an API key, every call
// but `auth` and `help` waits for an `auth` with the key, as on kvtierd's
// (docs/protocol.md, "On TCP"), and a connection without it after
// --http-timeout is closed; a TCP peer has no uid, so it is never
// privileged.
//
// Thread-safety: on the router's io thread only.
#pragma once

#include <array>
#include <boost/asio.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "router/line_connection.h"
#include "router/router.h"
#include "wire/access.h"
#include "wire/line_framer.h"
#include "wire/protocol.h"
#include "wire/write_queue.h"

namespace kvtier::router {

// The router's own error codes, beside kvtierd's (protocol.h).
namespace router_code {
inline constexpr int kNoDaemon = -32010;    // no daemon is usable now
inline constexpr int kDaemonLost = -32011;  // the daemon went away mid-request
}  // namespace router_code

struct SessionLimits {
  std::size_t max_line_bytes = 1 << 20;
  std::size_t max_output_bytes = 8 << 20;
  uid_t router_uid = 0;        // privileged: this uid and root (cancel of another's request)
  std::string api_key;         // non-empty (TCP with a key): `auth` first, as on kvtierd
  double auth_timeout_s = 30;  // with api_key: closed unless `auth` comes within it
};

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  using ClosedHandler = std::function<void(ClientSession*)>;
  // Takes over a connection whose first byte starts an HTTP request
  // (http::starts_http), with the bytes read, as kvtierd's Session does.
  using HttpHandoff =
      std::function<void(asio::generic::stream_protocol::socket socket, std::string already_read)>;

  ClientSession(asio::generic::stream_protocol::socket socket, Router& router, SessionLimits limits,
                std::optional<wire::PeerCredentials> peer, ClosedHandler on_closed,
                HttpHandoff on_http = {});

  void start();
  // Closes the connection and its daemon connections. Idempotent.
  void close();
  // The router stops (its drain ended): each call still on a daemon is
  // answered with `why` (its daemon connection closes, which cancels it
  // there), and the connection closes once the answers are written, or
  // after a second. Nothing more is read. Idempotent.
  void stop(const wire::RpcError& why);

  // Queues one protocol line (or drops the client if its buffer is full).
  void send(std::string line);
  void reply_error(const wire::RpcCall& call, const wire::RpcError& error);

  // Cancels request `id` (a router id this session started): sends `cancel`
  // to its daemon and answers `call` on `caller` with the daemon's answer.
  void cancel_for(const wire::RpcCall& call, std::uint64_t id,
                  std::shared_ptr<ClientSession> caller);

 private:
  // A call forwarded to a daemon, awaiting its answer.
  struct Forwarded {
    wire::RpcCall call;                        // the client's: its id, method and params
    std::uint64_t request_id = 0;              // the router's, for generate and cache.warm
    std::uint64_t daemon_request = 0;          // the daemon's, once it told
    std::shared_ptr<ClientSession> answer_on;  // a cancel for another session: the caller
    std::uint64_t answer_to_request = 0;       // a cancel: the router id it cancels
    bool streamed = false;                     // something reached the client already
    std::vector<int> tried;                    // daemons it was sent to
    int rows = 0;                              // its Route::rows on the last of them
    std::vector<int> tokens;                   // the prompt's, to route it again
    nlohmann::json refusal;  // the last daemon's kTooManyPending or kShuttingDown, if any
    std::string cache_salt;
  };
  struct Upstream {
    std::shared_ptr<LineConnection> conn;
    std::unordered_map<std::int64_t, Forwarded> calls;  // by the router's JSON-RPC id
  };

  void read();
  void on_line(const std::string& line);
  void reply(const wire::RpcCall& call, const nlohmann::json& result);
  wire::RequestOwner owner() const;

  // The methods the router answers, with a one-line summary each: the
  // dispatch table and `help` both come from it.
  struct Method {
    const char* name;
    const char* summary;
    void (ClientSession::*handler)(wire::RpcCall& call);
  };
  static const std::array<Method, 10>& methods();

  // generate, cache.lookup, cache.warm: to the daemon Router::route chooses.
  void routed_call(wire::RpcCall& call);
  void method_cancel(wire::RpcCall& call);
  void method_health(wire::RpcCall& call);
  void method_fleet(wire::RpcCall& call);
  void method_fleet_route(wire::RpcCall& call);
  void method_help(wire::RpcCall& call);
  void method_auth(wire::RpcCall& call);
  void method_shutdown(wire::RpcCall& call);
  // The router's uid or root (access.h).
  bool privileged() const;
  // Routes `f` (again), excluding the daemons it was tried on.
  void dispatch(Forwarded f);
  void send_to(int daemon, Forwarded f);
  Upstream& upstream(int daemon);
  void from_daemon(int daemon, const std::string& line);
  void daemon_lost(int daemon, const std::string& why);
  // The request is over: its router id is forgotten.
  void finished(const Forwarded& f);
  // The request is no longer on the daemon it was last sent to (answered,
  // or the connection is gone): that daemon's in-flight count drops.
  void left_daemon(const Forwarded& f);

  asio::generic::stream_protocol::socket socket_;
  Router& router_;
  SessionLimits limits_;
  std::optional<wire::PeerCredentials> peer_;
  ClosedHandler on_closed_;
  HttpHandoff on_http_;
  bool first_read_ = true;
  bool authenticated_ = false;  // `auth` gave limits_.api_key
  std::uint64_t connection_;
  wire::LineFramer framer_;
  std::array<char, 16384> read_buf_{};
  wire::WriteQueue<asio::generic::stream_protocol::socket> out_;
  asio::steady_timer auth_timer_;
  asio::steady_timer flush_timer_;                    // stop(): the answers' last second
  std::vector<std::unique_ptr<Upstream>> upstreams_;  // by daemon index; null until used
  std::int64_t next_call_id_ = 1;
  bool stopping_ = false;  // stop(): closing once the answers are written
  bool closed_ = false;
};

}  // namespace kvtier::router

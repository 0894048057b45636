// One JSON-RPC client connection, on the Unix socket or on the TCP
// listener (http_listen).
//
// HTTP on the same socket: a connection whose first byte starts an HTTP
// request (http::starts_http) is handed, with the bytes read, to the
// server's HTTP side (HttpHandoff) before anything is parsed here.
//
// On TCP with an API key (SessionOptions::api_key), every call but `auth`
// and `help` is refused with kUnauthenticated until an `auth` call gives the
// key, as Redis's AUTH, and a connection that has not given it within
// http_timeout is closed (a port on the network must not let strangers
// hold its connection slots): the socket's file mode guards the Unix socket, the
// key the port. A TCP peer has no credentials (no uid), so it is never
// privileged and cancels only its own connection's requests.
//
// Framing: newline-delimited JSON-RPC 2.0 (wire/protocol.h); a line over
// max_line_bytes (a runtime setting, read before every read) gets a
// kLineTooLong error and the connection goes on. A request without "id" is a
// notification: it runs, and gets no response (a streamed generate still
// sends its generate.token notifications).
// Requests are handled in arrival order, but responses to `generate` come
// when the engine finishes, so several generations may be in flight on one
// connection and their responses may come in any order (match them by id).
//
// Slow clients: replies queue in a bounded per-connection WriteQueue
// (max_output_bytes); a client that does not read them is dropped.
//
// Privileged methods (Method::privileged: `shutdown`, `config.set`,
// `cache.pin`, `cache.unpin`, `cache.flush`) are refused with
// kPermissionDenied unless the peer's uid may make them (wire/access.h). So is a
// `cancel` of a request that is neither this connection's, nor its uid's,
// from a peer not privileged (cancel_allowed).
//
// The prefix-cache methods (`tiers`, `cache.*`, session_cache.cpp) reach the
// cache only through EngineLoop::call, as `generate` reaches the scheduler
// through submit(): the engine thread does the work, the answer is posted
// back here.
//
// When the connection closes — the client left, it was dropped, or the
// daemon stops — every request of this session still running is cancelled,
// which gives its KV blocks back at once.
//
// Thread-safety: a Session lives on its io_context's thread; events from the
// engine thread reach it only through asio::post.
#pragma once

#include <array>
#include <boost/asio.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "daemon/control.h"
#include "daemon/engine_loop.h"
#include "wire/access.h"
#include "wire/line_framer.h"
#include "wire/protocol.h"
#include "wire/write_queue.h"

namespace kvtier::daemon {

namespace asio = boost::asio;

struct SessionOptions {
  std::size_t max_output_bytes = 8 << 20;  // reply bytes queued before the client is dropped
  // Privileged calls: allowed to this uid and root, or to anyone when
  // allow_any_uid is set. main() sets daemon_uid to the daemon's euid; the
  // default, root, fails closed.
  uid_t daemon_uid = 0;
  bool allow_any_uid = false;
  // Non-empty: `auth` with this key first (TCP with http_api_key_file).
  std::string api_key{};
  // The model's chat format, for `generate` with "messages"; must outlive
  // the session. Null: such a generate is refused.
  const wire::ChatTemplate* chat_template = nullptr;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // Called once when the connection has closed, on the io thread.
  using ClosedHandler = std::function<void(Session*)>;
  // Takes over a connection that speaks HTTP, with the bytes read from it.
  using HttpHandoff =
      std::function<void(asio::generic::stream_protocol::socket socket, std::string already_read)>;

  // `peer`: the client's credentials, nullopt when the kernel could not
  // tell (then no privileged call is allowed). `engine` and `control` must
  // outlive the session's handlers.
  Session(asio::generic::stream_protocol::socket socket, EngineLoop& engine, DaemonControl& control,
          SessionOptions options, std::optional<wire::PeerCredentials> peer,
          ClosedHandler on_closed, HttpHandoff on_http = {});

  // Starts reading. REQUIRES: the session is owned by a shared_ptr.
  void start();

  // Stops reading, flushes what is queued (for at most a second, then gives
  // up on a stalled client) and closes. Idempotent.
  void stop();

  // Queues one protocol line (or drops the client if its buffer is full).
  void send(std::string line);

  // The methods this daemon answers, with a one-line summary each: the
  // dispatch table and `help` both come from it.
  struct Method {
    const char* name;
    const char* summary;
    void (Session::*handler)(wire::RpcCall& call);
    // Changes or stops the daemon for every client: see the top of this file.
    bool privileged = false;
  };
  static const std::array<Method, 17>& methods();

 private:
  void read();
  void on_line(const std::string& line);
  // A write of out_ failed, or out_ went empty.
  void written(boost::system::error_code ec);
  void close();
  void reply(const wire::RpcCall& call, const nlohmann::json& result);
  void reply_error(const wire::RpcCall& call, const wire::RpcError& error);
  void on_engine_event(const wire::RpcCall& call, bool stream, EngineEvent event);
  // -32000 or -32002 for a generation the engine would not queue.
  void reply_submit_error(const wire::RpcCall& call, EngineLoop::SubmitError error);
  // This connection, as the owner of the requests it submits.
  wire::RequestOwner owner() const;
  // Whether the peer may make privileged calls (wire/access.h).
  bool privileged() const;

  void method_generate(wire::RpcCall& call);
  void method_cancel(wire::RpcCall& call);
  void method_stats(wire::RpcCall& call);
  void method_health(wire::RpcCall& call);
  void method_shutdown(wire::RpcCall& call);
  void method_config_get(wire::RpcCall& call);
  void method_config_set(wire::RpcCall& call);
  void method_help(wire::RpcCall& call);
  void method_auth(wire::RpcCall& call);
  // The prefix cache's methods (session_cache.cpp).
  void method_tiers(wire::RpcCall& call);
  void method_cache_lookup(wire::RpcCall& call);
  void method_cache_warm(wire::RpcCall& call);
  void method_cache_pin(wire::RpcCall& call);
  void method_cache_unpin(wire::RpcCall& call);
  void method_cache_tree(wire::RpcCall& call);
  void method_cache_flush(wire::RpcCall& call);
  void method_cache_subscribe(wire::RpcCall& call);

  // Runs `task` on the engine thread (EngineLoop::call) and answers `call`
  // with what it returns.
  using EngineTask = std::function<std::expected<nlohmann::json, wire::RpcError>(EngineAccess&)>;
  void reply_from_engine(const wire::RpcCall& call, EngineTask task);

  asio::generic::stream_protocol::socket socket_;
  asio::steady_timer flush_timer_;
  asio::steady_timer auth_timer_;  // with an API key: auth within http_timeout
  EngineLoop& engine_;
  DaemonControl& control_;
  SessionOptions options_;
  std::optional<wire::PeerCredentials> peer_;
  ClosedHandler on_closed_;
  HttpHandoff on_http_;
  bool first_read_ = true;
  bool authenticated_ = false;  // `auth` gave options_.api_key
  std::uint64_t connection_;    // this session's number, unique in the daemon's life

  wire::LineFramer framer_;
  std::array<char, 16384> read_buf_;
  wire::WriteQueue<asio::generic::stream_protocol::socket> out_;
  bool stopping_ = false;  // no more reads; close once out_ is written
  bool closed_ = false;
  std::unordered_set<RequestId> requests_;  // this session's requests not yet final
};

}  // namespace kvtier::daemon

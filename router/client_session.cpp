#include "router/client_session.h"

#include <algorithm>
#include <utility>

#include "wire/http/connection.h"
#include "wire/log.h"
#include "wire/prompt.h"

namespace kvtier::router {

using nlohmann::json;
using namespace kvtier::wire;

namespace {

// Requests to one daemon from one client: a client that floods them is
// dropped by the daemon's own limits first.
constexpr std::size_t kMaxUpstreamOutput = 64 << 20;

// The daemons' methods the router does not answer.
constexpr const char* kDaemonMethods[] = {
    "stats",       "tiers",     "config.get",  "config.set",      "cache.tree",
    "cache.flush", "cache.pin", "cache.unpin", "cache.subscribe", "shutdown"};

}  // namespace

ClientSession::ClientSession(asio::generic::stream_protocol::socket socket, Router& router,
                             SessionLimits limits, std::optional<PeerCredentials> peer,
                             ClosedHandler on_closed, HttpHandoff on_http)
    : socket_(std::move(socket)),
      router_(router),
      limits_(limits),
      peer_(peer),
      on_closed_(std::move(on_closed)),
      on_http_(std::move(on_http)),
      connection_(next_connection_number()),
      framer_(limits.max_line_bytes),
      out_(socket_, limits.max_output_bytes),
      auth_timer_(socket_.get_executor()),
      flush_timer_(socket_.get_executor()),
      upstreams_(static_cast<std::size_t>(router.daemons())) {}

void ClientSession::start() {
  if (!limits_.api_key.empty()) {
    auth_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(
        std::chrono::duration<double>(limits_.auth_timeout_s)));
    auth_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_ || self->authenticated_) return;
      log_info("closing a TCP connection that did not authenticate within --http-timeout");
      self->close();
    });
  }
  read();
}

RequestOwner ClientSession::owner() const {
  return {connection_, peer_ ? std::optional<uid_t>(peer_->uid) : std::nullopt};
}

void ClientSession::read() {
  socket_.async_read_some(
      asio::buffer(read_buf_),
      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        if (self->closed_ || self->stopping_) return;
        if (ec) return self->close();
        if (std::exchange(self->first_read_, false) && n > 0 &&
            wire::http::starts_http(self->read_buf_[0]) && self->on_http_) {
          self->closed_ = true;  // the socket goes on, as HTTP
          self->auth_timer_.cancel();
          self->on_http_(std::move(self->socket_), std::string(self->read_buf_.data(), n));
          if (self->on_closed_) std::exchange(self->on_closed_, nullptr)(self.get());
          return;
        }
        for (auto& item : self->framer_.feed(std::string_view(self->read_buf_.data(), n))) {
          if (item.too_long) {
            self->send(line_too_long_line(self->framer_.max_line_bytes()));
          } else {
            self->on_line(item.line);
          }
          if (self->closed_ || self->stopping_) return;
        }
        self->read();
      });
}

void ClientSession::send(std::string line) {
  if (closed_) return;
  const std::size_t bytes = line.size();
  if (!out_.push(std::move(line), shared_from_this(), [self = shared_from_this()](auto ec) {
        if (ec || self->stopping_) self->close();  // failed, or stop()'s answers are out
      })) {
    log_warning("dropping a client that does not read its replies (" +
                std::to_string(out_.queued_bytes() + bytes) + " bytes queued)");
    close();
  }
}

void ClientSession::reply(const RpcCall& call, const json& result) {
  if (call.has_id) send(response_line(call.id, result));
}

void ClientSession::reply_error(const RpcCall& call, const RpcError& error) {
  if (call.has_id) send(error_line(call.id, error));
}

void ClientSession::stop(const RpcError& why) {
  if (closed_ || stopping_) return;
  stopping_ = true;
  for (auto& u : upstreams_) {
    if (!u) continue;
    u->conn->close();  // cancels the calls there
    for (auto& [id, f] : std::exchange(u->calls, {})) {
      left_daemon(f);
      finished(f);
      if (f.answer_on)
        f.answer_on->reply_error(f.call, why);
      else
        reply_error(f.call, why);
    }
  }
  if (closed_) return;  // a reply dropped a client that does not read
  if (!out_.writing()) return close();
  flush_timer_.expires_after(std::chrono::seconds(1));
  flush_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->close();
  });
}

void ClientSession::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  auth_timer_.cancel();
  flush_timer_.cancel();
  socket_.shutdown(asio::socket_base::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
  // Closing the daemon connections cancels this session's requests there.
  for (auto& u : upstreams_) {
    if (!u) continue;
    u->conn->close();
    for (auto& [id, f] : u->calls) {
      left_daemon(f);
      finished(f);
    }
  }
  upstreams_.clear();
  if (on_closed_) std::exchange(on_closed_, nullptr)(this);
}

const std::array<ClientSession::Method, 10>& ClientSession::methods() {
  static const std::array<Method, 10> table = {{
      {"generate", "generate a continuation of a prompt, on the daemon the router chooses",
       &ClientSession::routed_call},
      {"cache.lookup", "how much of a prompt the chosen daemon caches, and in which tier",
       &ClientSession::routed_call},
      {"cache.warm", "prefill a prompt into the chosen daemon's cache",
       &ClientSession::routed_call},
      {"cancel", "cancel a running generate by its (router's) request id",
       &ClientSession::method_cancel},
      {"health", "ok while some daemon is usable; a usable daemon's model and config",
       &ClientSession::method_health},
      {"fleet", "every daemon: usable or not, its load and index; choices by reason",
       &ClientSession::method_fleet},
      {"fleet.route", "where a prompt would go now and why (every daemon's expected cost)",
       &ClientSession::method_fleet_route},
      {"shutdown",
       "let requests in flight finish (--drain-timeout), then stop the router (privileged); the "
       "daemons go on",
       &ClientSession::method_shutdown},
      {"help", "the methods this router answers", &ClientSession::method_help},
      {"auth", "give the API key, which a TCP connection needs before any other call",
       &ClientSession::method_auth},
  }};
  return table;
}

void ClientSession::on_line(const std::string& line) {
  auto call = call_parse(line);
  if (!call) return send(error_line(call.error().id, call.error().error));
  if (!limits_.api_key.empty() && !authenticated_ && call->method != "auth" &&
      call->method != "help")
    return reply_error(*call, unauthenticated_error());
  for (const Method& m : methods())
    if (call->method == m.name) return (this->*m.handler)(*call);
  for (const char* daemon_method : kDaemonMethods) {
    if (call->method == daemon_method)
      return reply_error(
          *call, {rpc_code::kMethodNotFound, "'" + call->method +
                                                 "' is a daemon's method, not the router's: ask a "
                                                 "daemon (`fleet` lists them)"});
  }
  reply_error(*call,
              {rpc_code::kMethodNotFound, "unknown method '" + call->method + "' (try 'help')"});
}

void ClientSession::method_auth(RpcCall& call) {
  auto result = auth_result(call.params, limits_.api_key);
  if (!result) return reply_error(call, result.error());
  if (!limits_.api_key.empty()) authenticated_ = true;
  auth_timer_.cancel();
  reply(call, *result);
}

void ClientSession::method_health(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  reply(call, router_.health());
}

void ClientSession::method_fleet(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  reply(call, router_.fleet());
}

void ClientSession::method_help(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  json list = json::array();
  for (const Method& m : methods()) list.push_back({{"name", m.name}, {"summary", m.summary}});
  reply(call, {{"methods", list}});
}

void ClientSession::method_fleet_route(RpcCall& call) {
  auto params = cache_prompt_params_parse(call.params, call.method);
  if (!params) return reply_error(call, params.error());
  auto tokens = prompt_tokens(router_.tokenizer(), std::move(params->prompt));
  if (!tokens) return reply_error(call, {rpc_code::kInvalidParams, tokens.error()});
  reply(call, router_.explain(*tokens, params->cache_salt));
}

void ClientSession::routed_call(RpcCall& call) {
  if (router_.draining())
    return reply_error(call, {rpc_code::kShuttingDown, "the router is shutting down"});
  Forwarded f;
  Prompt prompt;
  if (call.method == "generate") {
    auto params = generate_params_parse(call.params);
    if (!params) return reply_error(call, params.error());
    if (auto ok = generate_messages_render(*params, router_.chat_template()); !ok)
      return reply_error(call, ok.error());
    prompt = std::move(params->prompt);
    f.cache_salt = params->cache_salt;
  } else {
    auto params = cache_prompt_params_parse(call.params, call.method);
    if (!params) return reply_error(call, params.error());
    prompt = std::move(params->prompt);
    f.cache_salt = params->cache_salt;
  }
  auto tokens = prompt_tokens(router_.tokenizer(), std::move(prompt));
  if (!tokens) return reply_error(call, {rpc_code::kInvalidParams, tokens.error()});
  f.tokens = std::move(*tokens);
  if (call.method == "generate") f.request_id = router_.request_begin(weak_from_this(), owner());
  f.call = std::move(call);
  dispatch(std::move(f));
}

void ClientSession::dispatch(Forwarded f) {
  if (closed_) return finished(f);  // a reply to an earlier call dropped the client
  const auto route = router_.route(f.tokens, f.cache_salt, f.tried);
  if (!route) {
    if (f.refusal.is_object()) {  // every daemon left refused it: say what the last one said
      reply_error(f.call, {f.refusal.value("code", rpc_code::kTooManyPending),
                           f.refusal.value("message", std::string("refused"))});
    } else {
      reply_error(f.call, {router_code::kNoDaemon, "no daemon is usable now (" +
                                                       std::to_string(router_.daemons()) +
                                                       " configured; `fleet` says why)"});
    }
    return finished(f);
  }
  f.rows = route->rows;
  send_to(route->daemon, std::move(f));
}

ClientSession::Upstream& ClientSession::upstream(int daemon) {
  auto& u = upstreams_[static_cast<std::size_t>(daemon)];
  if (u) return *u;
  u = std::make_unique<Upstream>();
  u->conn = std::make_shared<LineConnection>(
      static_cast<asio::io_context&>(socket_.get_executor().context()),
      router_.link(daemon).where(), kMaxUpstreamOutput);
  const std::weak_ptr<ClientSession> weak = weak_from_this();
  u->conn->start(
      nullptr,
      [weak, daemon](std::string line) {
        if (auto self = weak.lock()) self->from_daemon(daemon, line);
      },
      [weak, daemon](std::string why) {
        if (auto self = weak.lock()) self->daemon_lost(daemon, why);
      });
  return *u;
}

void ClientSession::send_to(int daemon, Forwarded f) {
  f.tried.push_back(daemon);
  Upstream& u = upstream(daemon);
  const std::int64_t id = next_call_id_++;
  std::string line =
      json{{"jsonrpc", "2.0"}, {"id", id}, {"method", f.call.method}, {"params", f.call.params}}
          .dump(-1, ' ', false, json::error_handler_t::replace) +
      "\n";
  u.calls.emplace(id, std::move(f));
  u.conn->send(std::move(line));
}

void ClientSession::from_daemon(int daemon, const std::string& line) {
  Upstream& u = *upstreams_[static_cast<std::size_t>(daemon)];
  auto parsed = json_parse(line);
  if (!parsed || !parsed->is_object())
    return daemon_lost(daemon, "it sent a line that is not a JSON object");
  json& msg = *parsed;
  const auto id = msg.find("id");
  if (id == msg.end()) {  // a notification: generate.token is the only one for a request
    if (msg.value("method", std::string()) != "generate.token") return;
    auto params = msg.find("params");
    if (params == msg.end() || !params->is_object()) return;
    const auto rpc_id = params->find("rpc_id");
    if (rpc_id == params->end() || !rpc_id->is_number_integer()) return;
    const auto it = u.calls.find(rpc_id->get<std::int64_t>());
    if (it == u.calls.end()) return;
    Forwarded& f = it->second;
    if (const auto rid = params->find("id"); rid != params->end() && rid->is_number_unsigned())
      f.daemon_request = rid->get<std::uint64_t>();
    (*params)["id"] = f.request_id;
    if (f.call.has_id)
      (*params)["rpc_id"] = f.call.id;
    else
      params->erase("rpc_id");
    if (!f.streamed && !f.tried.empty()) router_.link(f.tried.back()).started(f.rows);
    f.streamed = true;
    return send(msg.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  }
  if (!id->is_number_integer()) return;
  const auto it = u.calls.find(id->get<std::int64_t>());
  if (it == u.calls.end()) return;
  Forwarded f = std::move(it->second);
  u.calls.erase(it);
  left_daemon(f);
  // Refused for now by a full or draining daemon: another may take it.
  if (const auto err = msg.find("error"); err != msg.end() && err->is_object() && !f.streamed &&
                                          f.call.method != "cancel" &&
                                          static_cast<int>(f.tried.size()) < router_.daemons()) {
    const int code = err->value("code", 0);
    if (code == rpc_code::kTooManyPending || code == rpc_code::kShuttingDown) {
      router_.count_retry();
      f.refusal = *err;
      return dispatch(std::move(f));
    }
  }
  if (auto result = msg.find("result"); result != msg.end() && result->is_object()) {
    if (f.request_id != 0 && result->contains("id")) (*result)["id"] = f.request_id;
    if (f.call.method == "generate") router_.count_cached(result->value("cached_tokens", json()));
    if (f.call.method == "cancel" && f.answer_to_request != 0)
      (*result)["cancelled"] = f.answer_to_request;
  }
  finished(f);
  if (!f.call.has_id) return;
  msg["id"] = f.call.id;
  std::string out = msg.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (f.answer_on)
    f.answer_on->send(std::move(out));
  else
    send(std::move(out));
}

void ClientSession::daemon_lost(int daemon, const std::string& why) {
  auto& slot = upstreams_[static_cast<std::size_t>(daemon)];
  if (!slot) return;
  std::unique_ptr<Upstream> u = std::move(slot);
  u->conn->close();
  const std::string address = router_.link(daemon).address();
  log_warning("lost daemon " + address + " with " + std::to_string(u->calls.size()) +
              " calls in flight: " + why);
  // In the order they were sent.
  std::vector<std::pair<std::int64_t, Forwarded>> calls(std::make_move_iterator(u->calls.begin()),
                                                        std::make_move_iterator(u->calls.end()));
  std::sort(calls.begin(), calls.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [id, f] : calls) left_daemon(f);
  for (auto& [id, f] : calls) {
    if (closed_) {  // a reply to an earlier one dropped the client
      finished(f);
      continue;
    }
    if (!f.streamed && f.call.method != "cancel" &&
        static_cast<int>(f.tried.size()) < router_.daemons()) {
      router_.count_retry();
      dispatch(std::move(f));
      continue;
    }
    const RpcError error{router_code::kDaemonLost,
                         "daemon " + address + " went away before answering: " + why};
    if (f.answer_on)
      f.answer_on->reply_error(f.call, error);
    else
      reply_error(f.call, error);
    finished(f);
  }
}

void ClientSession::finished(const Forwarded& f) {
  if (f.request_id != 0) router_.request_end(f.request_id);
}

void ClientSession::left_daemon(const Forwarded& f) {
  if (f.call.method != "cancel" && !f.tried.empty())
    router_.link(f.tried.back()).done(f.streamed ? 0 : f.rows);
}

bool ClientSession::privileged() const {
  return peer_ && privileged_call_allowed(peer_->uid, limits_.router_uid, false);
}

void ClientSession::method_shutdown(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  if (!privileged()) {
    return reply_error(call, {rpc_code::kPermissionDenied,
                              "permission denied: 'shutdown' is allowed only to uid " +
                                  std::to_string(limits_.router_uid) + " (the router's) and root"});
  }
  reply(call, {{"stopping", true}, {"program", "kvtier-router"}});
  log_info("shutdown requested by " + (peer_ ? to_string(*peer_) : std::string("a client")));
  if (router_.on_shutdown) router_.on_shutdown();
}

void ClientSession::method_cancel(RpcCall& call) {
  auto id = cancel_params_parse(call.params);
  if (!id) return reply_error(call, id.error());
  const RpcError unknown{rpc_code::kInvalidParams,
                         "no running request with id " + std::to_string(*id)};
  const Router::Owned* owned = router_.request(*id);
  auto session = owned ? owned->session.lock() : nullptr;
  if (!session) return reply_error(call, unknown);
  if (!cancel_allowed(owned->owner, owner(), privileged())) {
    return reply_error(
        call, {rpc_code::kPermissionDenied,
               "permission denied: request " + std::to_string(*id) +
                   " was submitted by another connection and uid; only its "
                   "connection, its uid, uid " +
                   std::to_string(limits_.router_uid) + " (the router's) and root may cancel it"});
  }
  session->cancel_for(call, *id, shared_from_this());
}

void ClientSession::cancel_for(const RpcCall& call, std::uint64_t id,
                               std::shared_ptr<ClientSession> caller) {
  for (std::size_t d = 0; d < upstreams_.size(); ++d) {
    if (!upstreams_[d]) continue;
    for (auto& [call_id, f] : upstreams_[d]->calls) {
      if (f.request_id != id) continue;
      if (f.daemon_request == 0) break;  // not started there: the client cannot know its id
      Forwarded c;
      c.call = call;
      c.call.params = {{"id", f.daemon_request}};
      c.answer_on = caller.get() == this ? nullptr : caller;
      c.answer_to_request = id;
      const std::int64_t cid = next_call_id_++;
      std::string line =
          json{{"jsonrpc", "2.0"}, {"id", cid}, {"method", "cancel"}, {"params", c.call.params}}
              .dump() +
          "\n";
      upstreams_[d]->calls.emplace(cid, std::move(c));
      upstreams_[d]->conn->send(std::move(line));
      return;
    }
  }
  caller->reply_error(
      call, {rpc_code::kInvalidParams, "no running request with id " + std::to_string(id)});
}

}  // namespace kvtier::router

#include "daemon/session.h"

#include <omp.h>

#include <chrono>
#include <utility>

#include "daemon/cache_methods.h"
#include "engine/build_info.h"
#include "wire/http/connection.h"
#include "wire/http/openai.h"
#include "wire/log.h"

namespace kvtier::daemon {

using wire::auth_result;
using wire::call_parse;
using wire::cancel_params_parse;
using wire::error_line;
using wire::generate_messages_render;
using wire::generate_params_parse;
using wire::line_too_long_line;
using wire::log_debug;
using wire::log_info;
using wire::log_warning;
using wire::next_connection_number;
using wire::no_params_check;
using wire::notification_line;
using wire::PeerCredentials;
using wire::privileged_call_allowed;
using wire::Prompt;
using wire::RequestOwner;
using wire::response_line;
using wire::RpcCall;
using wire::RpcError;
using wire::unauthenticated_error;
namespace rpc_code = wire::rpc_code;

using nlohmann::json;

const std::array<Session::Method, 17>& Session::methods() {
  static const std::array<Method, 17> table = {{
      {"generate", "generate a continuation of a prompt (text or token ids), optionally streamed",
       &Session::method_generate},
      {"cancel", "cancel a running generate by its request id", &Session::method_cancel},
      {"stats", "scheduler and request counters", &Session::method_stats},
      {"health", "liveness check and model summary", &Session::method_health},
      {"config.get", "every setting, its value and whether it can change at run time",
       &Session::method_config_get},
      {"config.set", "change runtime settings (privileged)", &Session::method_config_set, true},
      {"tiers", "the prefix cache's tiers: capacity, use, traffic, errors; load costs",
       &Session::method_tiers},
      {"cache.lookup", "how many of a prompt's tokens are cached, and in which tier",
       &Session::method_cache_lookup},
      {"cache.warm", "prefill a prompt into the cache without generating",
       &Session::method_cache_warm},
      {"cache.pin", "keep a prompt's cached prefix from being dropped (privileged)",
       &Session::method_cache_pin, true},
      {"cache.unpin", "undo a cache.pin (privileged)", &Session::method_cache_unpin, true},
      {"cache.tree", "a summary of the radix tree per tier", &Session::method_cache_tree},
      {"cache.flush",
       "drop what one tier (by its name in `tiers`) or all of them may drop (privileged)",
       &Session::method_cache_flush, true},
      {"cache.subscribe",
       "what the prefix cache holds, then a cache.events notification for every change",
       &Session::method_cache_subscribe},
      {"shutdown", "let running requests finish (drain_timeout), then stop (privileged)",
       &Session::method_shutdown, true},
      {"help", "the methods this daemon answers", &Session::method_help},
      {"auth", "give the API key, which a TCP connection needs before any other call",
       &Session::method_auth},
  }};
  return table;
}

Session::Session(asio::generic::stream_protocol::socket socket, EngineLoop& engine,
                 DaemonControl& control, SessionOptions options,
                 std::optional<PeerCredentials> peer, ClosedHandler on_closed, HttpHandoff on_http)
    : socket_(std::move(socket)),
      flush_timer_(socket_.get_executor()),
      auth_timer_(socket_.get_executor()),
      engine_(engine),
      control_(control),
      options_(options),
      peer_(peer),
      on_closed_(std::move(on_closed)),
      on_http_(std::move(on_http)),
      connection_(next_connection_number()),
      framer_(control.config().max_line_bytes),
      out_(socket_, options.max_output_bytes) {}

RequestOwner Session::owner() const {
  return {connection_, peer_ ? std::optional<uid_t>(peer_->uid) : std::nullopt};
}

bool Session::privileged() const {
  return peer_ && privileged_call_allowed(peer_->uid, options_.daemon_uid, options_.allow_any_uid);
}

void Session::start() {
  if (!options_.api_key.empty()) {
    const double seconds = control_.config().http_timeout;
    auth_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(
        std::chrono::duration<double>(seconds)));
    auth_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_ || self->authenticated_) return;
      log_info("closing a TCP connection that did not authenticate within http_timeout");
      self->close();
    });
  }
  read();
}

void Session::read() {
  socket_.async_read_some(
      asio::buffer(read_buf_),
      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        if (self->closed_ || self->stopping_) return;
        if (ec) {
          if (ec != asio::error::eof) log_debug("connection read failed: " + ec.message());
          self->close();
          return;
        }
        if (std::exchange(self->first_read_, false) && n > 0 &&
            wire::http::starts_http(self->read_buf_[0]) && self->on_http_) {
          self->closed_ = true;  // the socket goes on, as HTTP
          self->auth_timer_.cancel();
          self->on_http_(std::move(self->socket_), std::string(self->read_buf_.data(), n));
          if (self->on_closed_) self->on_closed_(self.get());
          return;
        }
        // The limit in force when the bytes arrived (config.set may change it).
        self->framer_.set_max_line_bytes(self->control_.config().max_line_bytes);
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

void Session::on_line(const std::string& line) {
  auto call = call_parse(line);
  if (!call) {
    send(error_line(call.error().id, call.error().error));
    return;
  }
  if (!options_.api_key.empty() && !authenticated_ && call->method != "auth" &&
      call->method != "help") {
    reply_error(*call, unauthenticated_error());
    return;
  }
  for (const Method& m : methods()) {
    if (call->method == m.name) {
      if (m.privileged && !privileged()) {
        const std::string who = peer_ ? "uid " + std::to_string(peer_->uid) : "an unknown peer";
        log_warning("refused '" + call->method + "' from " + who);
        reply_error(*call,
                    {rpc_code::kPermissionDenied,
                     "permission denied: '" + call->method + "' is allowed only to uid " +
                         std::to_string(options_.daemon_uid) + " (the daemon's) and root, not " +
                         who + " (start kvtierd with --allow-any-uid to allow every client)"});
        return;
      }
      (this->*m.handler)(*call);
      return;
    }
  }
  reply_error(*call,
              {rpc_code::kMethodNotFound, "unknown method '" + call->method + "' (try 'help')"});
}

void Session::reply(const RpcCall& call, const json& result) {
  if (call.has_id) send(response_line(call.id, result));
}

void Session::reply_error(const RpcCall& call, const RpcError& error) {
  if (call.has_id) send(error_line(call.id, error));
}

void Session::send(std::string line) {
  if (closed_) return;
  const std::size_t bytes = line.size();
  if (!out_.push(std::move(line), shared_from_this(),
                 [this](boost::system::error_code ec) { written(ec); })) {
    log_warning("dropping a client that does not read its replies (" +
                std::to_string(out_.queued_bytes() + bytes) + " bytes queued)");
    close();
  }
}

void Session::written(boost::system::error_code ec) {
  if (closed_) return;
  if (ec) {
    log_debug("connection write failed: " + ec.message());
    close();
  } else if (stopping_) {
    close();
  }
}

void Session::stop() {
  if (closed_ || stopping_) return;
  stopping_ = true;
  if (!out_.writing()) {
    close();
    return;
  }
  flush_timer_.expires_after(std::chrono::seconds(1));
  flush_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->close();
  });
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  flush_timer_.cancel();
  auth_timer_.cancel();
  socket_.shutdown(asio::socket_base::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
  log_info("client disconnected: " + (peer_ ? to_string(*peer_) : std::string("unknown peer")) +
           (requests_.empty()
                ? std::string()
                : ", cancelling its " + std::to_string(requests_.size()) + " running requests"));
  // Nobody is left to read these results: give their KV back now.
  for (RequestId id : requests_) (void)engine_.cancel(id, owner(), privileged());
  if (on_closed_) on_closed_(this);
}

void Session::method_generate(RpcCall& call) {
  auto params = generate_params_parse(call.params);
  if (!params) return reply_error(call, params.error());
  if (!params->messages.empty()) {
    if (options_.chat_template == nullptr)
      return reply_error(call, {rpc_code::kInvalidParams, "this server renders no conversations"});
    if (auto ok = generate_messages_render(*params, *options_.chat_template); !ok)
      return reply_error(call, ok.error());
  }
  const bool stream = params->stream;

  // The sink runs on the engine thread; hop to this session's executor.
  auto self = shared_from_this();
  EventSink sink = [self, call, stream](EngineEvent event) {
    asio::post(self->socket_.get_executor(),
               [self, call, stream, event = std::move(event)]() mutable {
                 self->on_engine_event(call, stream, std::move(event));
               });
  };
  Prompt prompt = std::move(params->prompt);
  auto id = engine_.submit(std::move(prompt), std::move(*params), std::move(sink), owner());
  if (!id) return reply_submit_error(call, id.error());
  requests_.insert(*id);
}

void Session::reply_submit_error(const RpcCall& call, EngineLoop::SubmitError error) {
  if (error == EngineLoop::SubmitError::kTooManyPending) {
    return reply_error(
        call, {rpc_code::kTooManyPending, "too many pending requests (max_pending); retry later"});
  }
  reply_error(call, {rpc_code::kShuttingDown, "the daemon is shutting down"});
}

namespace {

// [{"token": id, "text", "logprob", "top": [{"token", "text", "logprob"}]}].
json logprobs_to_json(const std::vector<TokenLogprobs>& entries) {
  const auto one = [](const LogprobText& t) {
    return json{{"token", t.token}, {"text", t.text}, {"logprob", t.logprob}};
  };
  json out = json::array();
  for (const TokenLogprobs& e : entries) {
    json entry = one(e.chosen);
    entry["top"] = json::array();
    for (const LogprobText& alt : e.top) entry["top"].push_back(one(alt));
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

void Session::on_engine_event(const RpcCall& call, bool stream, EngineEvent event) {
  if (!event.final) {
    if (stream) {
      json note = {{"id", event.id},
                   {"sample", event.sample},
                   {"tokens", event.tokens},
                   {"text", event.text}};
      // The generate's own JSON-RPC id: a client with several generates in
      // flight on one connection routes tokens by it, before it knows the
      // request ids their answers carry.
      if (call.has_id) note["rpc_id"] = call.id;
      if (!event.logprobs.empty()) note["logprobs"] = logprobs_to_json(event.logprobs);
      send(notification_line("generate.token", note));
    }
    return;
  }
  requests_.erase(event.id);
  if (!event.result) {
    return reply_error(
        call,
        {event.invalid_params ? rpc_code::kInvalidParams : rpc_code::kInternalError, event.error});
  }
  const GenerateResult& r = *event.result;
  json samples = json::array();
  std::size_t completion_tokens = 0;
  for (const SampleResult& s : r.samples) {
    json sample = {{"text", s.text}, {"tokens", s.tokens}, {"finish_reason", s.finish_reason}};
    if (!s.logprobs.empty()) sample["logprobs"] = logprobs_to_json(s.logprobs);
    samples.push_back(std::move(sample));
    completion_tokens += s.tokens.size();
  }
  // The top level is sample 0, so an n = 1 client never looks at `samples`.
  const SampleResult& first = r.samples.front();
  reply(call, {{"id", event.id},
               {"text", first.text},
               {"tokens", first.tokens},
               {"finish_reason", r.finish_reason},
               {"samples", std::move(samples)},
               {"seed", r.seed},
               {"prompt_tokens", r.prompt_tokens},
               {"completion_tokens", completion_tokens},
               {"cached_tokens", per_tier_to_json(r.cached_tokens)},
               {"timings",
                {{"queue_ms", r.queue_ms}, {"ttft_ms", r.ttft_ms}, {"total_ms", r.total_ms}}}});
}

void Session::method_cancel(RpcCall& call) {
  auto id = cancel_params_parse(call.params);
  if (!id) return reply_error(call, id.error());
  switch (engine_.cancel(*id, owner(), privileged())) {
    case EngineLoop::CancelResult::kCancelling:
      break;
    case EngineLoop::CancelResult::kUnknown:
      return reply_error(
          call, {rpc_code::kInvalidParams, "no running request with id " + std::to_string(*id)});
    case EngineLoop::CancelResult::kNotAllowed: {
      const std::string who = peer_ ? "uid " + std::to_string(peer_->uid) : "an unknown peer";
      log_warning("refused 'cancel' of request " + std::to_string(*id) + " from " + who);
      return reply_error(call, {rpc_code::kPermissionDenied,
                                "permission denied: request " + std::to_string(*id) +
                                    " was submitted by another connection and uid; only its "
                                    "connection, its uid, uid " +
                                    std::to_string(options_.daemon_uid) +
                                    " (the daemon's) and root may cancel it"});
    }
  }
  // The generate call itself answers with finish_reason "cancelled".
  reply(call, {{"cancelled", *id}});
}

void Session::method_stats(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  auto self = shared_from_this();
  engine_.stats([self, call](EngineStats s) {
    asio::post(self->socket_.get_executor(), [self, call, s] {
      const SchedulerStats& q = s.scheduler;
      self->reply(call, {{"version", version()},
                         {"git_revision", git_revision()},
                         {"waiting", q.waiting},
                         {"prefilling", q.prefilling},
                         {"running", q.running},
                         {"backlog_rows", q.backlog_rows},
                         {"blocks_used", q.blocks_used},
                         {"blocks_free", q.blocks_free},
                         {"steps", q.steps},
                         {"preemptions", q.preemptions},
                         {"recomputed_tokens", q.recomputed_tokens},
                         {"evicted_blocks", q.evicted_blocks},
                         {"swapped", q.swapped},
                         {"swapped_out", q.swapped_out},
                         {"swapped_in", q.swapped_in},
                         {"discarded_passes", q.discarded_passes},
                         {"cache", s.cache ? cache_stats_to_json(*s.cache) : json(nullptr)},
                         {"pending", s.pending},
                         {"requests_submitted", s.submitted},
                         {"requests_completed", s.completed},
                         {"requests_cancelled", s.cancelled},
                         {"requests_failed", s.failed},
                         {"tokens_generated", s.tokens_generated},
                         {"connections", self->control_.connections()}});
    });
  });
}

void Session::method_health(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  const ModelConfig& m = engine_.model_config();
  const SchedulerConfig& c = control_.config().scheduler;
  const BudgetChoice budgets = engine_.budgets(c);
  reply(call, {{"status", "ok"},
               {"version", version()},
               {"git_revision", git_revision()},
               {"device", engine_.device()},
               {"threads", omp_get_max_threads()},
               {"model",
                {{"name", wire::http::served_model_name(control_.config().model_dir)},
                 {"n_layer", m.n_layer},
                 {"n_head", m.n_head},
                 {"n_kv_head", m.n_kv_head},
                 {"n_embd", m.n_embd},
                 {"vocab_size", m.vocab_size},
                 {"block_size", m.block_size}}},
               {"config",
                {{"max_kv_tokens", c.max_kv_tokens},
                 {"max_batch_size", c.max_batch_size},
                 {"token_budget", budgets.token_budget},
                 {"mixed_prefill_tokens", budgets.mixed_prefill_tokens},
                 {"policy", to_string(c.policy)},
                 {"page_size", c.page_size}}}});
}

void Session::method_shutdown(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  reply(call, {{"stopping", true}, {"program", "kvtierd"}});
  log_info("shutdown requested by " + (peer_ ? to_string(*peer_) : std::string("a client")));
  control_.shutdown();
}

void Session::method_config_get(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  const DaemonConfig& config = control_.config();
  json out = config_to_json(config);
  // What 0 (chosen at start) comes to on this device, and why.
  const BudgetChoice budgets = engine_.budgets(config.scheduler);
  out["token_budget"]["chosen"] = budgets.token_budget;
  out["mixed_prefill_tokens"]["chosen"] = budgets.mixed_prefill_tokens;
  out["token_budget"]["why"] = out["mixed_prefill_tokens"]["why"] = budgets.why;
  reply(call, out);
}

void Session::method_config_set(RpcCall& call) {
  const json changes = call.params;
  const std::string who = peer_ ? to_string(*peer_) : std::string("a client");
  auto self = shared_from_this();
  control_.config_update(
      [changes](const DaemonConfig& current) { return config_with_changes(current, changes); },
      [self, call, who](const std::expected<std::vector<SettingChange>, std::string>& done) {
        if (!done) return self->reply_error(call, {rpc_code::kInvalidParams, done.error()});
        json changed = json::object();
        for (const SettingChange& c : *done) {
          changed[c.setting->name] = c.to;
          log_info("config.set by " + who + ": " + c.setting->name + " " + c.from.dump() + " -> " +
                   c.to.dump());
        }
        self->reply(call, {{"changed", std::move(changed)}});
      });
}

void Session::method_help(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  json list = json::array();
  for (const Method& m : methods()) list.push_back({{"name", m.name}, {"summary", m.summary}});
  reply(call, {{"methods", list}});
}

void Session::method_auth(RpcCall& call) {
  auto result = auth_result(call.params, options_.api_key);
  if (!result) {
    if (result.error().code == rpc_code::kUnauthenticated)
      log_warning("a TCP client gave a wrong API key");
    return reply_error(call, result.error());
  }
  if (!options_.api_key.empty()) authenticated_ = true;
  auth_timer_.cancel();
  reply(call, *result);
}

}  // namespace kvtier::daemon

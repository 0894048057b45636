// The Session's prefix-cache methods: `tiers` and `cache.*`
// (docs/protocol.md). The work happens on the engine thread
// (cache_methods.h); this file parses, routes and answers.
#include <utility>

#include "daemon/cache_methods.h"
#include "daemon/session.h"

namespace kvtier::daemon {

using wire::cache_flush_params_parse;
using wire::cache_prompt_params_parse;
using wire::log_info;
using wire::no_params_check;
using wire::notification_line;
using wire::RpcCall;
using wire::RpcError;
namespace rpc_code = wire::rpc_code;

using nlohmann::json;

void Session::reply_from_engine(const RpcCall& call, EngineTask task) {
  auto self = shared_from_this();
  engine_.call([self, call, task = std::move(task)](EngineAccess& e) {
    auto result = task(e);
    asio::post(self->socket_.get_executor(), [self, call, result = std::move(result)] {
      if (!result) return self->reply_error(call, result.error());
      self->reply(call, *result);
    });
  });
}

void Session::method_tiers(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  if (!control_.config().scheduler.prefix_cache) return reply_error(call, no_prefix_cache_error());
  auto self = shared_from_this();
  engine_.stats([self, call](EngineStats s) {
    asio::post(self->socket_.get_executor(), [self, call, s = std::move(s)] {
      if (!s.cache) return self->reply_error(call, no_prefix_cache_error());
      self->reply(call, tiers_to_json(*s.cache, s.requests));
    });
  });
}

void Session::method_cache_lookup(RpcCall& call) {
  auto params = cache_prompt_params_parse(call.params, "cache.lookup");
  if (!params) return reply_error(call, params.error());
  reply_from_engine(call, [p = std::move(*params)](EngineAccess& e) { return cache_lookup(e, p); });
}

void Session::method_cache_pin(RpcCall& call) {
  auto params = cache_prompt_params_parse(call.params, "cache.pin");
  if (!params) return reply_error(call, params.error());
  reply_from_engine(call,
                    [p = std::move(*params)](EngineAccess& e) { return cache_pin(e, p, +1); });
}

void Session::method_cache_unpin(RpcCall& call) {
  auto params = cache_prompt_params_parse(call.params, "cache.unpin");
  if (!params) return reply_error(call, params.error());
  reply_from_engine(call,
                    [p = std::move(*params)](EngineAccess& e) { return cache_pin(e, p, -1); });
}

void Session::method_cache_tree(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  reply_from_engine(call, [](EngineAccess& e) { return cache_tree(e); });
}

void Session::method_cache_flush(RpcCall& call) {
  auto tiers = cache_flush_params_parse(call.params);
  if (!tiers) return reply_error(call, tiers.error());
  const std::string who = peer_ ? to_string(*peer_) : std::string("a client");
  log_info("cache.flush " + call.params["tier"].get<std::string>() + " by " + who);
  reply_from_engine(call, [t = std::move(*tiers)](EngineAccess& e) { return cache_flush(e, t); });
}

// A generation of one greedy token whose result is thrown away: the prefill
// is what leaves the prompt's blocks in the cache, and it is the same
// prefill a later generate with this prompt and salt would have done. No
// eviction policy, whatever the daemon's default: a request with one never
// leaves blocks in the cache. Answers once the request has finished, with
// what it found cached and a fresh cache.lookup.
void Session::method_cache_warm(RpcCall& call) {
  auto params = cache_prompt_params_parse(call.params, "cache.warm");
  if (!params) return reply_error(call, params.error());
  if (!control_.config().scheduler.prefix_cache) return reply_error(call, no_prefix_cache_error());
  RequestParams rp;
  rp.max_tokens = 1;
  rp.sampling.temperature = 0;
  rp.cache_salt = params->cache_salt;
  rp.eviction = EvictionPolicy::none();

  auto self = shared_from_this();
  auto prompt = params->prompt;
  EventSink sink = [self, call, p = std::move(*params)](EngineEvent event) {
    if (!event.final) return;  // the discarded token
    asio::post(self->socket_.get_executor(), [self, call, p, event = std::move(event)] {
      self->requests_.erase(event.id);
      if (!event.result) {
        return self->reply_error(
            call, {event.invalid_params ? rpc_code::kInvalidParams : rpc_code::kInternalError,
                   event.error});
      }
      const GenerateResult& r = *event.result;
      if (r.finish_reason == "cancelled") {
        return self->reply_error(call, {rpc_code::kShuttingDown, "cache.warm was cancelled"});
      }
      const json found = {{"prompt_tokens", r.prompt_tokens},
                          {"cached_tokens", per_tier_to_json(r.cached_tokens)},
                          {"total_ms", r.total_ms}};
      self->reply_from_engine(call, [p, found](EngineAccess& e) -> std::expected<json, RpcError> {
        auto now = cache_lookup(e, p);
        if (!now) return std::unexpected(now.error());
        json out = found;
        out["lookup"] = std::move(*now);
        return out;
      });
    });
  };
  auto id = engine_.submit(std::move(prompt), std::move(rp), std::move(sink), owner());
  if (!id) return reply_submit_error(call, id.error());
  requests_.insert(*id);
}

// The cache's contents, then every change (EngineLoop::subscribe_cache).
// The subscription lasts as long as the connection: a client that does not
// read its events is dropped like any other (send), and subscribes again on
// a new connection for a fresh snapshot.
void Session::method_cache_subscribe(RpcCall& call) {
  if (auto ok = no_params_check(call.params); !ok) return reply_error(call, ok.error());
  if (!control_.config().scheduler.prefix_cache) return reply_error(call, no_prefix_cache_error());
  const std::weak_ptr<Session> weak = shared_from_this();
  auto executor = socket_.get_executor();
  engine_.subscribe_cache(
      [weak, executor](const EngineLoop::CacheEvents& batch) {
        if (weak.expired()) return false;
        asio::post(executor, [weak, batch] {
          if (auto self = weak.lock())
            self->send(notification_line("cache.events", cache_events_to_json(batch)));
        });
        return true;
      },
      [self = shared_from_this(), call](EngineLoop::CacheSnapshot snapshot) {
        asio::post(self->socket_.get_executor(), [self, call, snapshot = std::move(snapshot)] {
          if (!snapshot.enabled) return self->reply_error(call, no_prefix_cache_error());
          self->reply(call, cache_snapshot_to_json(snapshot));
        });
      });
}

}  // namespace kvtier::daemon

#include "router/daemon_link.h"

#include <expected>
#include <utility>
#include <variant>

#include "wire/log.h"
#include "wire/protocol.h"

namespace kvtier::router {

using nlohmann::json;
using wire::log_info;
using wire::log_warning;

namespace {

// Control calls and their answers are small; a daemon that stops reading
// them is dropped long before this.
constexpr std::size_t kMaxControlOutput = 1 << 20;

// The error of a response, or "" when it has a result.
std::string error_of(const json& message) {
  const auto err = message.find("error");
  if (err == message.end()) return message.contains("result") ? "" : "an answer with no result";
  return err->is_object() ? err->value("message", std::string("an error")) : "an error";
}

bool no_prefix_cache(const json& message) {
  const auto err = message.find("error");
  return err != message.end() && err->is_object() &&
         err->value("code", 0) == wire::rpc_code::kNoPrefixCache;
}

// A count in a daemon's `stats`: nullopt when absent, an error unless an
// integer >= 0, capped at 2^30 (the router adds its own to it).
std::expected<std::optional<int>, std::monostate> stats_count(const json& stats, const char* name) {
  const auto it = stats.find(name);
  if (it == stats.end()) return std::nullopt;
  if (!it->is_number_integer() || it->get<long long>() < 0)
    return std::unexpected(std::monostate{});
  return static_cast<int>(std::min<long long>(it->get<long long>(), 1 << 30));
}

}  // namespace

DaemonLink::DaemonLink(asio::io_context& io, DaemonAddress address, FleetModel& fleet)
    : io_(io), where_(std::move(address)), fleet_(fleet), timer_(io) {}

DaemonLink::~DaemonLink() {
  on_weighed_change = nullptr;  // its owner may be going too
  stop();
}

void DaemonLink::start() {
  connect();
  tick();
}

void DaemonLink::stop() {
  stopped_ = true;
  timer_.cancel();
  if (conn_) conn_->close();
  conn_.reset();
  set_usable(false);
}

void DaemonLink::tick() {
  if (stopped_) return;
  const auto now = Clock::now();
  if (!conn_) {
    if (now >= next_connect_) connect();
  } else if (awaited_id_ != 0) {
    if (now - awaited_since_ > kAnswerTimeout) fail("no answer within 1 s");
  } else if (subscribed_) {
    if (now >= next_costs_) {
      next_costs_ = now + kCostsInterval;
      call("tiers", [this](const json& m) { on_costs(m); });
    } else {
      call("stats", [this](const json& m) { on_stats(m); });
    }
  }
  timer_.expires_after(kPollInterval);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void DaemonLink::connect() {
  subscribed_ = false;
  awaited_id_ = 0;
  awaited_ = nullptr;
  conn_ = std::make_shared<LineConnection>(io_, where_, kMaxControlOutput);
  conn_->start([this] { call("health", [this](const json& m) { handshake_health(m); }); },
               [this](std::string line) { on_line(line); }, [this](std::string why) { fail(why); });
}

void DaemonLink::call(const std::string& method, Answer answer) {
  awaited_id_ = next_call_id_++;
  awaited_ = std::move(answer);
  awaited_since_ = Clock::now();
  conn_->send(json{{"jsonrpc", "2.0"}, {"id", awaited_id_}, {"method", method}}.dump() + "\n");
}

void DaemonLink::on_line(const std::string& line) {
  auto parsed = wire::json_parse(line);
  // A line cut short or garbled: its events are lost, so start again from
  // a snapshot (a call it answered is asked again there).
  if (!parsed || !parsed->is_object()) return resync("a line that is not a JSON object");
  const json& message = *parsed;
  const auto id = message.find("id");
  if (id == message.end()) {
    if (message.value("method", std::string()) != "cache.events" || !subscribed_) return;
    const auto params = message.find("params");
    auto applied = params == message.end() ? std::unexpected(std::string("events lack params"))
                                           : index_.apply(*params);
    if (!applied) resync(applied.error());
    return;
  }
  if (*id == "auth") {  // the line LineConnection sent first, on TCP with a key
    if (auto err = error_of(message); !err.empty()) return fail("auth: " + err);
    return;
  }
  if (!id->is_number_integer() || id->get<std::int64_t>() != awaited_id_)
    return fail("it answered a call it was not asked");
  awaited_id_ = 0;
  auto answer = std::exchange(awaited_, nullptr);
  answer(message);
}

void DaemonLink::handshake_health(const json& message) {
  if (auto err = error_of(message); !err.empty()) return fail("health: " + err);
  const json& r = message["result"];
  const ModelConfig& want = fleet_.config;
  const json model = r.value("model", json::object());
  const json config = r.value("config", json::object());
  const auto same = [&](const char* key, int value) {
    return model.contains(key) && model[key] == value;
  };
  // A daemon from before grouped-query attention does not say n_kv_head:
  // its model had one KV head per head.
  const json kv_heads =
      model.contains("n_kv_head") ? model["n_kv_head"] : model.value("n_head", json());
  if (!same("n_layer", want.n_layer) || !same("n_head", want.n_head) ||
      kv_heads != want.n_kv_head || !same("n_embd", want.n_embd) ||
      !same("vocab_size", want.vocab_size) || !same("block_size", want.block_size))
    return fail("it serves another model than the router's --model (" + model.dump() + ")");
  const auto page = config.find("page_size");
  if (page == config.end() || !page->is_number_integer() || page->get<long long>() < 1 ||
      page->get<long long>() > want.block_size)
    return fail("its health answer has no valid config.page_size");
  const int page_size = page->get<int>();
  if (fleet_.page_size == 0) fleet_.page_size = page_size;
  if (page_size != fleet_.page_size)
    return fail("its page size " + std::to_string(page_size) + " is not the fleet's " +
                std::to_string(fleet_.page_size));
  health_ = r;
  const auto device = r.find("device"), threads = r.find("threads");
  std::string kind = device != r.end() && device->is_string() ? device->get<std::string>() : "?";
  kind += threads != r.end() && threads->is_number_integer()
              ? "/" + std::to_string(threads->get<long long>())
              : "/?";
  if (kind != kind_) {
    kind_ = std::move(kind);
    weighed_changed();
  }
  call("tiers", [this](const json& m) { handshake_tiers(m); });
}

void DaemonLink::handshake_tiers(const json& message) {
  if (no_prefix_cache(message)) {
    costs_ = {};
    weighed_changed();
  } else {
    if (auto err = error_of(message); !err.empty()) return fail("tiers: " + err);
    on_costs(message);
  }
  next_costs_ = Clock::now() + kCostsInterval;
  call("cache.subscribe", [this](const json& m) { handshake_subscribe(m); });
}

void DaemonLink::handshake_subscribe(const json& message) {
  index_.clear();
  if (!no_prefix_cache(message)) {
    if (auto err = error_of(message); !err.empty()) return fail("cache.subscribe: " + err);
    if (auto ok = index_.reset(message["result"]); !ok)
      return fail("cache.subscribe: " + ok.error());
    if (index_.page_size() != fleet_.page_size)
      return fail("its cache's page size is not the fleet's");
    if (!fleet_.fingerprint) fleet_.fingerprint = index_.fingerprint();
    if (index_.fingerprint() != *fleet_.fingerprint) {
      index_.clear();
      char text[64];
      std::snprintf(text, sizeof text, "%016llx, the fleet's %016llx",
                    static_cast<unsigned long long>(index_.fingerprint()),
                    static_cast<unsigned long long>(*fleet_.fingerprint));
      return fail(std::string("its model fingerprint is ") + text + " (other weights or settings)");
    }
  }
  subscribed_ = true;
  if (!usable_) log_info("daemon " + address() + " is in use");
  set_usable(true);
  last_error_.clear();
}

void DaemonLink::on_stats(const json& message) {
  if (auto err = error_of(message); !err.empty()) return fail("stats: " + err);
  const json& r = message["result"];
  const auto pending = stats_count(r, "pending");
  if (!pending || !*pending) return fail("its stats have no valid 'pending'");
  // Optional: a daemon without it weighs by what the router sent it alone.
  const auto backlog = stats_count(r, "backlog_rows");
  if (!backlog) return fail("its stats have an invalid 'backlog_rows'");
  pending_ = **pending;
  backlog_rows_ = backlog->value_or(0);
}

void DaemonLink::on_costs(const json& message) {
  if (no_prefix_cache(message)) return;
  if (auto err = error_of(message); !err.empty()) return fail("tiers: " + err);
  auto costs = CostFigures::parse(message["result"].value("costs", json()));
  if (!costs) return fail("tiers: " + costs.error());
  costs_ = std::move(*costs);
  weighed_changed();
}

void DaemonLink::set_usable(bool usable) {
  if (usable_ == usable) return;
  usable_ = usable;
  weighed_changed();
}

void DaemonLink::fail(const std::string& why) {
  if (conn_) conn_->close();
  conn_.reset();
  index_.clear();
  subscribed_ = false;
  awaited_id_ = 0;
  awaited_ = nullptr;
  next_connect_ = Clock::now() + kRetryInterval;
  if (usable_ || last_error_ != why) log_warning("daemon " + address() + " is out of use: " + why);
  if (usable_) ++downs_;
  set_usable(false);
  last_error_ = why;
}

void DaemonLink::resync(const std::string& why) {
  // Twice within a second: not a lost line but a stream that keeps
  // breaking; out of use, so it costs retries, not a busy loop.
  const auto now = Clock::now();
  if (now - last_resync_ < kAnswerTimeout) return fail("its event stream keeps breaking: " + why);
  last_resync_ = now;
  log_warning("daemon " + address() + ": " + why + "; subscribing again");
  ++resyncs_;
  if (conn_) conn_->close();
  conn_.reset();
  index_.clear();
  connect();  // usable meanwhile, as it was
}

json DaemonLink::describe() const {
  json blocks = json::object();
  for (int t = 0; t < kNumTiers; ++t) blocks[kTierNames[t].name] = index_.blocks()[t];
  return {{"address", address()},           {"usable", usable_}, {"pending", pending()},
          {"backlog_rows", backlog_rows()}, {"routed", routed_}, {"blocks", blocks},
          {"indexed", !index_.stale()},     {"downs", downs_},   {"resyncs", resyncs_},
          {"last_error", last_error_}};
}

}  // namespace kvtier::router

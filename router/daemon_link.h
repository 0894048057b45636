// The router's view of one kvtierd: a control connection that asks its
// `health` (the model and page size, checked against the fleet's), its
// `tiers` costs and a `cache.subscribe` snapshot, then follows its
// `cache.events` and polls its `stats` for load.
//
// A daemon is usable() from the end of that handshake until it fails:
//  - its connection breaks (a daemon killed is out at once), or
//  - a call goes unanswered for kAnswerTimeout (a daemon stopped or wedged
//    is out within a second), or
//  - it serves another model, page size or fingerprint than the fleet's
//    (the first daemon to answer sets them; a mismatch stays out, retried).
// Then its index is dropped and it is tried again every kRetryInterval;
// it is back once a new handshake ends.
//
// A batch of events that does not follow the last (lost events), or a line
// that does not parse, makes the link subscribe again on a fresh
// connection; the daemon stays usable meanwhile, with an empty index (it
// matches nothing until the new snapshot), so a bad stream costs hits,
// never a wrong route. A second one within a second takes it out of use.
//
// Thread-safety: on the router's io thread only.
#pragma once

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/model/model_config.h"
#include "router/block_index.h"
#include "router/daemon_address.h"
#include "router/line_connection.h"
#include "router/route_choice.h"

namespace kvtier::router {

// What every daemon of the fleet must agree on. The model's shape comes
// from the router's --model; the rest from the first daemon that answers.
struct FleetModel {
  ModelConfig config;
  int page_size = 0;                         // 0: no daemon has answered yet
  std::optional<std::uint64_t> fingerprint;  // none: no daemon has a prefix cache yet
};

class DaemonLink {
 public:
  static constexpr auto kAnswerTimeout = std::chrono::seconds(1);
  static constexpr auto kPollInterval = std::chrono::milliseconds(100);
  static constexpr auto kRetryInterval = std::chrono::milliseconds(250);
  static constexpr auto kCostsInterval = std::chrono::seconds(5);

  // `fleet` outlives the link.
  DaemonLink(asio::io_context& io, DaemonAddress address, FleetModel& fleet);
  ~DaemonLink();
  DaemonLink(const DaemonLink&) = delete;
  DaemonLink& operator=(const DaemonLink&) = delete;

  // Connects, and keeps reconnecting until stop().
  void start();
  void stop();

  bool usable() const { return usable_; }
  // As --daemon gave it, for logs and labels.
  const std::string& address() const { return where_.text; }
  const DaemonAddress& where() const { return where_; }
  const BlockIndex& index() const { return index_; }
  const CostFigures& costs() const { return costs_; }
  // What daemons it may share a prefill curve with (route_choice.h): its
  // device and compute threads, from `health`.
  const std::string& kind() const { return kind_; }
  // Requests queued and running there: its last `stats`, or the router's
  // own requests in flight there when more (they are current; the stats
  // also count other routers' and clients').
  int pending() const { return std::max(pending_, in_flight_); }
  // Rows its passes hold before a new request's own: its last `stats`
  // (`backlog_rows`), or the rows of the router's own requests there that
  // have not begun to answer, when more (as pending()).
  int backlog_rows() const { return static_cast<int>(std::max(backlog_rows_, unstarted_rows_)); }
  // The router sent it a request with `rows` rows to prefill there; that
  // request's first token came back; and it is over, with the rows it had
  // not started (0 once started(), else its rows).
  void routed(int rows) {
    ++in_flight_;
    ++routed_;
    unstarted_rows_ += std::max(0, rows);
  }
  void started(int rows) { unstarted_rows_ = std::max(0L, unstarted_rows_ - std::max(0, rows)); }
  void done(int unstarted_rows) {
    started(unstarted_rows);
    in_flight_ = std::max(0, in_flight_ - 1);
  }
  // The router's own requests there now: routed() and not yet done().
  int in_flight() const { return in_flight_; }
  // Its last `health` answer (null before the first).
  const nlohmann::json& health() const { return health_; }
  // Called when what the router weighs it by apart from its load changes:
  // its costs, its kind, or whether it is usable.
  std::function<void()> on_weighed_change;
  // For the router's `fleet` answer.
  nlohmann::json describe() const;

 private:
  using Clock = std::chrono::steady_clock;
  using Answer = std::function<void(const nlohmann::json& message)>;

  void tick();
  void connect();
  void call(const std::string& method, Answer answer);
  void on_line(const std::string& line);
  void handshake_health(const nlohmann::json& message);
  void handshake_tiers(const nlohmann::json& message);
  void handshake_subscribe(const nlohmann::json& message);
  void on_stats(const nlohmann::json& message);
  void on_costs(const nlohmann::json& message);
  void set_usable(bool usable);
  void weighed_changed() const {
    if (on_weighed_change) on_weighed_change();
  }
  // Out of use (logged once), retried after kRetryInterval.
  void fail(const std::string& why);
  // A fresh subscription, staying usable meanwhile.
  void resync(const std::string& why);

  asio::io_context& io_;
  DaemonAddress where_;
  FleetModel& fleet_;
  asio::steady_timer timer_;
  std::shared_ptr<LineConnection> conn_;
  BlockIndex index_;
  CostFigures costs_;
  nlohmann::json health_;
  std::int64_t next_call_id_ = 1;
  std::int64_t awaited_id_ = 0;  // 0: no call outstanding
  Answer awaited_;
  Clock::time_point awaited_since_;
  Clock::time_point next_connect_{};
  Clock::time_point next_costs_{};
  Clock::time_point last_resync_{};
  bool subscribed_ = false;  // the handshake ended on this connection
  bool usable_ = false;
  bool stopped_ = false;
  std::string kind_;
  int pending_ = 0;
  int in_flight_ = 0;
  long backlog_rows_ = 0;     // its last stats'
  long unstarted_rows_ = 0;   // of the router's requests there with no token back yet
  std::uint64_t routed_ = 0;  // requests sent there, ever
  std::uint64_t downs_ = 0;
  std::uint64_t resyncs_ = 0;
  std::string last_error_;
};

}  // namespace kvtier::router

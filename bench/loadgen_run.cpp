#include "bench/loadgen_run.h"

#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "bench/loadgen_stats.h"
#include "bench/loadgen_wire.h"
#include "ctl/rpc_client.h"

namespace kvtier::bench {

namespace asio = boost::asio;

using nlohmann::json;
using stream = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;

double RequestRecord::ttft_ms() const {
  if (first_token_s >= 0) return (first_token_s - arrival_s) * 1000.0;
  if (daemon_ttft_ms >= 0 && sent_s >= 0) return (sent_s - arrival_s) * 1000.0 + daemon_ttft_ms;
  return -1;
}

double RequestRecord::queue_total_ms() const {
  if (sent_s < 0) return -1;
  return (sent_s - arrival_s) * 1000.0 + std::max(0.0, queue_ms);
}

double RequestRecord::tokens_per_s() const {
  // Decode speed after the first token, from the client's clock.
  if (!ok() || completion_tokens < 2 || first_token_s < 0 || done_s <= first_token_s) return -1;
  return (completion_tokens - 1) / (done_s - first_token_s);
}

int RequestRecord::cached_total() const { return cached.total(); }

int RequestRecord::hit_tier() const {
  for (int t = kNumTiers - 1; t >= 0; --t)
    if (cached[t] > 0) return t + 1;
  return 0;
}

long LoadResult::lost() const {
  long n = 0;
  for (const auto& r : records)
    if (r.done_s < 0) ++n;
  return n;
}

long LoadResult::failed() const {
  long n = 0;
  for (const auto& r : records)
    if (r.done_s >= 0 && !r.error.empty()) ++n;
  return n;
}

long read_rss_kb(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      long kb = -1;
      fields >> kb;
      return kb;
    }
  }
  return -1;
}

namespace {

class Runner;

// One socket, one request in flight at most.
struct Connection {
  Connection(asio::io_context& io, int daemon, std::unique_ptr<Wire> wire)
      : socket(io), daemon(daemon), wire(std::move(wire)) {}
  stream::socket socket;
  int daemon;  // index into LoadOptions::sockets
  std::unique_ptr<Wire> wire;
  std::array<char, 16384> in;
  std::string out;    // the request being written
  long current = -1;  // index into records, -1 = idle
  bool alive = true;
};

class Runner {
 public:
  explicit Runner(const LoadOptions& o)
      : options_(o),
        workload_(o.kinds, o.seed, o.context, o.word_tokens),
        rng_(o.seed ^ 0x5DEECE66DULL),
        arrival_timer_(io_),
        progress_timer_(io_),
        drain_timer_(io_) {}

  LoadResult run() {
    LoadResult result;
    result.duration_s = options_.duration_s;
    if (options_.sockets.empty()) {
      result.error = "no kvtierd socket to drive";
      return result;
    }
    if (!make_wire(options_.api)) {
      result.error = "no such API '" + options_.api + "' (jsonrpc or http)";
      return result;
    }
    backlogs_.resize(options_.sockets.size());
    for (int d = 0; d < static_cast<int>(options_.sockets.size()); ++d) {
      for (int i = 0; i < options_.concurrency; ++i) {
        auto c = std::make_unique<Connection>(io_, d, make_wire(options_.api));
        boost::system::error_code ec;
        c->socket.connect(stream::endpoint(options_.sockets[d]), ec);
        if (ec) {
          result.error =
              "cannot connect to kvtierd at " + options_.sockets[d] + ": " + ec.message();
          return result;
        }
        connections_.push_back(std::move(c));
      }
    }
    if (auto s = stats_once()) result.stats_before = *s;
    start_ = Clock::now();
    std::thread poller([this] { poll_stats(); });
    for (int i = 0; i < static_cast<int>(connections_.size()); ++i) read(i);
    schedule_arrival();
    schedule_progress();
    drain_timer_.expires_after(seconds(options_.duration_s + options_.drain_timeout_s));
    drain_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) finish();
    });
    io_.run();
    {
      std::lock_guard lock(poll_mu_);
      poll_stop_ = true;
    }
    poll_cv_.notify_all();
    poller.join();
    if (options_.progress && tty_) std::fprintf(stderr, "\n");
    result.elapsed_s = now_s();
    if (auto s = stats_once()) result.stats_after = *s;
    result.records = std::move(records_);
    result.samples = std::move(samples_);
    return result;
  }

 private:
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  double now_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // Every daemon's `stats`, summed (sum_stats); nullopt if one did not answer.
  static std::optional<json> stats_of(std::vector<ctl::RpcClient>& clients) {
    std::vector<json> each;
    for (ctl::RpcClient& client : clients) {
      auto r = client.call("stats", json::object());
      if (!r) return std::nullopt;
      each.push_back(std::move(*r));
    }
    return sum_stats(each);
  }

  std::optional<std::vector<ctl::RpcClient>> stats_clients() const {
    std::vector<ctl::RpcClient> clients;
    const auto& sockets =
        options_.stats_sockets.empty() ? options_.sockets : options_.stats_sockets;
    for (const std::string& socket : sockets) {
      auto client = ctl::RpcClient::connect(socket);
      if (!client) return std::nullopt;
      clients.push_back(std::move(*client));
    }
    return clients;
  }

  std::optional<json> stats_once() {
    auto clients = stats_clients();
    return clients ? stats_of(*clients) : std::nullopt;
  }

  long rss_kb() const {
    long sum = 0;
    for (int pid : options_.daemon_pids) {
      const long kb = read_rss_kb(pid);
      if (kb < 0) return -1;
      sum += kb;
    }
    return options_.daemon_pids.empty() ? -1 : sum;
  }

  // The stats thread: one sample a second on connections of its own
  // (RpcClient, blocking), until the run ends.
  void poll_stats() {
    auto clients = stats_clients();
    if (!clients) return;
    auto next = start_;
    std::unique_lock lock(poll_mu_);
    while (!poll_stop_) {
      next += std::chrono::seconds(1);
      if (poll_cv_.wait_until(lock, next, [this] { return poll_stop_; })) break;
      lock.unlock();
      auto r = stats_of(*clients);
      StatsSample s;
      s.t_s = now_s();
      s.rss_kb = rss_kb();
      lock.lock();
      if (!r) break;  // a daemon went away; the run will notice
      s.stats = std::move(*r);
      samples_.push_back(std::move(s));
      last_stats_ = samples_.back().stats;
    }
  }

  void schedule_arrival() {
    std::exponential_distribution<double> gap(options_.rate);
    next_arrival_s_ += gap(rng_);
    if (next_arrival_s_ >= options_.duration_s) {
      arrivals_done_ = true;
      maybe_finish();
      return;
    }
    arrival_timer_.expires_at(start_ + seconds(next_arrival_s_));
    arrival_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || finished_) return;  // see finish()
      RequestRecord r;
      r.index = static_cast<long>(records_.size());
      r.item = workload_.next();
      r.arrival_s = now_s();
      // Round-robin, as a load balancer in front of a fleet would spread them.
      r.daemon = static_cast<int>(r.index % static_cast<long>(backlogs_.size()));
      records_.push_back(std::move(r));
      backlogs_[records_.back().daemon].push_back(records_.back().index);
      ++backlog_size_;
      dispatch();
      schedule_arrival();
    });
  }

  void dispatch() {
    for (int i = 0; i < static_cast<int>(connections_.size()) && backlog_size_ > 0; ++i) {
      Connection& c = *connections_[i];
      std::deque<long>& backlog = backlogs_[c.daemon];
      if (!c.alive || c.current >= 0 || backlog.empty()) continue;
      const long idx = backlog.front();
      backlog.pop_front();
      --backlog_size_;
      send(i, idx);
    }
  }

  void send(int conn, long idx) {
    Connection& c = *connections_[conn];
    RequestRecord& r = records_[idx];
    c.out = c.wire->request(r);
    c.current = idx;
    r.connection = conn;
    r.sent_s = now_s();
    ++in_flight_;
    asio::async_write(c.socket, asio::buffer(c.out),
                      [this, conn](boost::system::error_code ec, std::size_t) {
                        if (ec) fail_connection(conn, "send failed: " + ec.message());
                      });
  }

  void read(int conn) {
    Connection& c = *connections_[conn];
    c.socket.async_read_some(asio::buffer(c.in),
                             [this, conn](boost::system::error_code ec, std::size_t n) {
                               if (ec) {
                                 fail_connection(conn, "connection closed: " + ec.message());
                                 return;
                               }
                               Connection& c = *connections_[conn];
                               if (c.current >= 0) {
                                 RequestRecord& r = records_[c.current];
                                 if (c.wire->feed(std::string_view(c.in.data(), n), r, now_s())) {
                                   r.done_s = now_s();
                                   complete(conn);
                                 }
                               }
                               if (c.alive) read(conn);
                             });
  }

  void complete(int conn) {
    Connection& c = *connections_[conn];
    RequestRecord& r = records_[c.current];
    workload_.answered(r.item, r.text, r.ok());
    if (r.ok()) {
      ++done_;
      tokens_ += r.completion_tokens;
    } else {
      ++errors_;
    }
    c.current = -1;
    --in_flight_;
    dispatch();
    maybe_finish();
  }

  void fail_connection(int conn, const std::string& why) {
    Connection& c = *connections_[conn];
    if (!c.alive) return;
    c.alive = false;
    boost::system::error_code ignored;
    c.socket.close(ignored);
    if (c.current >= 0) {
      RequestRecord& r = records_[c.current];
      r.done_s = now_s();
      r.error = why;
      complete(conn);
    }
    bool any = false;
    for (auto& other : connections_) any = any || (other->alive && other->daemon == c.daemon);
    if (!any) {  // nothing left to send this daemon's backlog on: it is lost
      backlog_size_ -= backlogs_[c.daemon].size();
      backlogs_[c.daemon].clear();
    }
    any = false;
    for (auto& other : connections_) any = any || other->alive;
    if (!any) {  // no daemon left
      arrivals_done_ = true;
      arrival_timer_.cancel();
      maybe_finish();
    }
  }

  void maybe_finish() {
    if (arrivals_done_ && backlog_size_ == 0 && in_flight_ == 0) finish();
  }

  // Ends the run: io_.run() returns once nothing is left to wait for. A
  // timer's cancel() does not reach a handler whose wait already completed
  // and is queued; the timer handlers check finished_ instead, or a queued
  // progress tick would re-arm itself every second for ever (a soak test
  // once hung that way after its last answer).
  void finish() {
    if (finished_) return;
    finished_ = true;
    arrival_timer_.cancel();
    progress_timer_.cancel();
    drain_timer_.cancel();
    if (options_.progress) print_progress();
    for (auto& c : connections_) {
      boost::system::error_code ignored;
      c->alive = false;
      c->socket.close(ignored);
    }
  }

  void schedule_progress() {
    progress_timer_.expires_after(std::chrono::seconds(1));
    progress_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || finished_) return;  // see finish()
      // On a terminal the line is redrawn every second; in a log, a line every 10 s.
      if (options_.progress && (tty_ || ++ticks_ % 10 == 0)) print_progress();
      schedule_progress();
    });
  }

  void print_progress() {
    const double t = now_s();
    const double tok_s = (tokens_ - last_tokens_) / std::max(1e-3, t - last_progress_s_);
    last_tokens_ = tokens_;
    last_progress_s_ = t;
    std::string tiers;
    {
      std::lock_guard lock(poll_mu_);
      const StatsView v = view_stats(last_stats_);
      if (v.blocks_used >= 0) tiers = " | kv " + std::to_string(v.blocks_used) + " blk";
      for (int i = 0; i < kNumTiers; ++i)
        if (v.tier[i].present && v.tier[i].used >= 0 && v.tier[i].capacity > 0)
          tiers += " " + std::string(kTierNames[i].label) + " " + std::to_string(v.tier[i].used) +
                   "/" + std::to_string(v.tier[i].capacity);
    }
    std::fprintf(stderr,
                 "%s%s[%5.0fs/%.0fs] arrived %ld done %ld errors %ld in flight %d backlog %zu "
                 "%.0f tok/s%s   %s",
                 tty_ ? "\r" : "", options_.label.c_str(), t, options_.duration_s,
                 static_cast<long>(records_.size()), done_, errors_, in_flight_, backlog_size_,
                 tok_s, tiers.c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
  }

  LoadOptions options_;
  Workload workload_;
  std::mt19937_64 rng_;
  asio::io_context io_;
  asio::steady_timer arrival_timer_, progress_timer_, drain_timer_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<RequestRecord> records_;
  std::vector<std::deque<long>> backlogs_;  // per daemon: arrived, not yet sent
  std::size_t backlog_size_ = 0;            // over all daemons
  Clock::time_point start_;
  double next_arrival_s_ = 0;
  bool arrivals_done_ = false, finished_ = false;
  int in_flight_ = 0;
  long done_ = 0, errors_ = 0, tokens_ = 0, last_tokens_ = 0;
  double last_progress_s_ = 0;
  bool tty_ = ::isatty(STDERR_FILENO) != 0;
  long ticks_ = 0;

  std::mutex poll_mu_;  // guards samples_, last_stats_, poll_stop_
  std::condition_variable poll_cv_;
  bool poll_stop_ = false;
  std::vector<StatsSample> samples_;
  json last_stats_ = json::object();
};

}  // namespace

LoadResult run_load(const LoadOptions& options) { return Runner(options).run(); }

}  // namespace kvtier::bench

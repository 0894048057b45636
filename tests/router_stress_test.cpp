// kvtier-router under many clients at once, its daemons killed and
// restarted in a loop meanwhile, for KVTIER_ROUTER_STRESS_S seconds (12 by
// default, for the suite; minutes for a real run, 300 s in both builds
// when it was written). Black-box: the real router in front of three real
// kvtierd.
//
// The clients, each kind on threads of its own until the time is up:
//  - callers: streamed and whole generations, several on one connection,
//    over JSON-RPC and HTTP (keep-alive); every answer must carry the
//    tokens (text, on HTTP) a live daemon gave the same request before the
//    load, and a stream's pieces must add up to its answer;
//  - leavers: the same requests, the client gone at a random point;
//  - a slow reader: streams read in small pieces, with pauses;
//  - idle connections held from start to end, which must still answer;
//    and slow HTTP requests that never finish, which --http-timeout ends;
//  - over-long JSON-RPC lines (-32001, and the connection goes on) and HTTP
//    bodies (413).
// The chaos: every few seconds one daemon, in turn, is SIGKILLed and
// started again on its socket; the next only once the router uses it again,
// so two of the three always run.
//
// What must hold: no request hangs; none is answered twice or with other
// tokens; none that had not streamed is lost (it is sent to another daemon;
// a request may still be refused when no daemon is usable, counted); a
// request that had streamed may end with the router's error. Afterwards
// the router holds nothing (no request, no daemon pending by its count),
// its file descriptors are back to their count before the load, and
// `shutdown` makes it exit 0 (under ASan, LeakSanitizer checks it then).
// Its resident memory before and after is printed, not held to a bound:
// the allocator keeps what was freed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#include "http_test_util.h"
#include "router_test_util.h"

namespace kvtier::daemon_test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kDaemons = 3;
constexpr int kMaxTokens = 24;
constexpr std::size_t kMaxLineBytes = 64 << 10;  // the router's, for the over-long inputs
const std::vector<std::string> kPrompts = {"Q: Why?\nA:", "The cat", "Q: What is a towel for?",
                                           "Fortune: ",   "A",       "Q: Who are you?\nA: I am"};

double stress_seconds() {
  const char* s = std::getenv("KVTIER_ROUTER_STRESS_S");
  const double v = s ? std::atof(s) : 0;
  return v > 0 ? v : 12;
}

// What a live daemon answered to prompt i (seed i, temperature 0.8).
struct Reference {
  std::vector<int> tokens;  // JSON-RPC's
  std::string text;         // HTTP's choices[0].text
};

json rpc_params(std::size_t i, bool stream) {
  return generate_params(kPrompts[i], kMaxTokens, 0.8f, i + 1, stream);
}
std::string http_body(std::size_t i, bool stream) {
  return json{{"prompt", kPrompts[i]},
              {"max_tokens", kMaxTokens},
              {"temperature", 0.8},
              {"seed", i + 1},
              {"stream", stream}}
      .dump();
}
std::string http_post(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Everything the clients saw, counted across threads.
struct Outcomes {
  std::atomic<long> answered{0}, streamed_then_lost{0}, unrouted{0}, refused{0}, left{0};
  std::atomic<long> oversized{0}, idle_answered{0}, slow_ended{0};
  std::mutex mu;
  std::vector<std::string> problems;  // what broke a property, the first few

  void problem(const std::string& what) {
    std::lock_guard lock(mu);
    if (problems.size() < 20) problems.push_back(what);
  }
};

// One HTTP response read from `c` as it comes (a slow reader: `piece`
// bytes a read, `pause` between reads); nullopt (the reason in `why`) on a
// timeout, a closed connection, bytes that are not HTTP, or bytes past the
// response (an answer nobody asked for).
std::optional<boost::beast::http::response<boost::beast::http::string_body>> http_response(
    Client& c, std::string& why, std::size_t piece = 65536, std::chrono::milliseconds pause = 0ms) {
  namespace bhttp = boost::beast::http;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.eager(true);
  parser.body_limit(64 << 20);
  std::string pending;
  while (!parser.is_done()) {
    auto more = c.read_raw(kTimeout, piece);
    if (!more) {
      why = "no whole HTTP response (timed out or closed)";
      return std::nullopt;
    }
    pending += *more;
    for (;;) {  // the parser takes a header whole, then the body as it comes
      boost::system::error_code ec;
      const std::size_t used = parser.put(boost::asio::buffer(pending), ec);
      pending.erase(0, used);
      if (ec == bhttp::error::need_more) break;
      if (ec) {
        why = "not HTTP: " + ec.message();
        return std::nullopt;
      }
      if (used == 0 || parser.is_done()) break;
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  if (!pending.empty()) {
    why = "bytes past the response: " + pending.substr(0, 200);
    return std::nullopt;
  }
  return parser.release();
}

// The text of a completion's stream (its events' choices[0].text), and
// whether it ended with an error event.
struct StreamText {
  std::string text;
  int events = 0;
  bool error = false;
  bool done = false;
};
StreamText stream_text(const std::string& body) {
  StreamText s;
  for (const json& e : test_util::sse_events(body)) {
    if (e == "[DONE]") {
      s.done = true;
    } else if (e.contains("error")) {
      s.error = true;
    } else if (e.contains("choices") && !e["choices"].empty()) {
      s.text += e["choices"][0].value("text", "");
      ++s.events;
    }
  }
  return s;
}

class Stress {
 public:
  Stress(const std::vector<Reference>& refs, const std::string& socket, Clock::time_point end)
      : refs_(refs), socket_(socket), end_(end) {}

  Outcomes out;

  // JSON-RPC: several generations on each connection, in turn.
  void rpc_caller(unsigned seed) {
    std::mt19937 rng(seed);
    while (Clock::now() < end_) {
      Client c(socket_);
      if (!c.valid()) return out.problem("cannot connect to the router");
      for (int id = 1; id <= 4 && Clock::now() < end_; ++id)
        if (!rpc_generate(c, id, rng() % kPrompts.size(), rng() % 2)) break;
    }
  }

  // HTTP: several completions on each keep-alive connection.
  void http_caller(unsigned seed) {
    std::mt19937 rng(seed);
    while (Clock::now() < end_) {
      Client c(socket_);
      if (!c.valid()) return out.problem("cannot connect to the router");
      for (int k = 0; k < 4 && Clock::now() < end_; ++k)
        if (!http_completion(c, rng() % kPrompts.size(), rng() % 2)) break;
    }
  }

  // The same requests, left at a random point: before any answer, after
  // some bytes, or after the whole answer.
  void leaver(unsigned seed) {
    std::mt19937 rng(seed);
    while (Clock::now() < end_) {
      Client c(socket_);
      if (!c.valid()) return out.problem("cannot connect to the router");
      const std::size_t i = rng() % kPrompts.size();
      const bool http = rng() % 2;
      c.send_raw(http ? http_post(http_body(i, true)) : rpc_params_line(i));
      // A short wait: what it reads is the router's business, not the test's.
      for (int reads = rng() % 4; reads > 0; --reads)
        if (!c.read_raw(200ms)) break;
      ++out.left;
    }
  }

  // Streams read a few bytes at a time, with pauses: answers all the same.
  void slow_reader(unsigned seed) {
    std::mt19937 rng(seed);
    while (Clock::now() < end_) {
      Client c(socket_);
      const std::size_t i = rng() % kPrompts.size();
      c.send_raw(http_post(http_body(i, true)));
      std::string why;
      auto res = http_response(c, why, 7, 2ms);
      if (!res) return out.problem("slow reader: " + why);
      if (res->result_int() == 200) check_stream(stream_text(res->body()), i, "slow reader");
      ++out.slow_ended;
    }
  }

  // Over-long JSON-RPC lines and HTTP bodies: refused, and a JSON-RPC
  // connection goes on.
  void oversized() {
    while (Clock::now() < end_) {
      {
        Client c(socket_);
        c.send_raw(std::string(kMaxLineBytes + 1, 'x') + "\n");
        auto refused = c.read();
        if (error_code(refused) != -32001)
          out.problem("an over-long line: " + (refused ? refused->dump() : "no answer"));
        auto health = c.call(request(2, "health"));
        if (!health || !health->contains("result"))
          out.problem("the connection did not go on after an over-long line");
      }
      {
        Client c(socket_);
        c.send_raw(http_post(std::string(kMaxLineBytes + 1, ' ')));
        std::string why;
        auto res = http_response(c, why);
        if (!res || res->result_int() != 413)
          out.problem("an over-long body: " + (res ? std::to_string(res->result_int()) : why));
      }
      ++out.oversized;
      std::this_thread::sleep_for(50ms);
    }
  }

 private:
  static std::string rpc_params_line(std::size_t i) {
    return request(1, "generate", rpc_params(i, true)).dump() + "\n";
  }

  void check_stream(const StreamText& s, std::size_t i, const std::string& who) {
    if (s.error) {
      if (s.events == 0) out.problem(who + ": an error event with nothing streamed before it");
      ++out.streamed_then_lost;
    } else if (!s.done || s.text != refs_[i].text) {
      out.problem(who + ": stream of prompt " + std::to_string(i) + " is '" + s.text +
                  "', a live daemon's '" + refs_[i].text + "'");
    } else {
      ++out.answered;
    }
  }

  // False when the connection cannot be used on.
  bool rpc_generate(Client& c, int id, std::size_t i, bool stream) {
    if (!c.send(request(id, "generate", rpc_params(i, stream)))) {
      out.problem("the router closed a JSON-RPC connection");
      return false;
    }
    std::vector<int> streamed;
    for (;;) {
      auto msg = c.read();
      if (!msg) {
        out.problem("a JSON-RPC generate got no answer (hung, or the connection closed)");
        return false;
      }
      if (!msg->contains("id")) {
        const json& p = (*msg)["params"];
        if (p.value("rpc_id", json()) != id)
          out.problem("a token for another call: " + msg->dump());
        for (int t : p["tokens"]) streamed.push_back(t);
        continue;
      }
      if ((*msg)["id"] != id) {
        out.problem("an answer to a call already answered, or never made: " + msg->dump());
        return false;
      }
      if (msg->contains("result")) {
        const auto tokens = (*msg)["result"]["tokens"].get<std::vector<int>>();
        if (tokens != refs_[i].tokens || (stream && streamed != tokens))
          out.problem("prompt " + std::to_string(i) +
                      " answered with other tokens: " + msg->dump());
        else
          ++out.answered;
        return true;
      }
      const int code = error_code(msg);
      if (code == -32011 && !streamed.empty()) {
        ++out.streamed_then_lost;
      } else if (code == -32010) {
        ++out.unrouted;
      } else if (code == -32000 || code == -32002) {
        ++out.refused;
      } else {
        out.problem("a JSON-RPC generate failed (" + std::to_string(streamed.size()) +
                    " tokens streamed): " + msg->dump());
      }
      return true;
    }
  }

  bool http_completion(Client& c, std::size_t i, bool stream) {
    if (!c.send_raw(http_post(http_body(i, stream)))) {
      out.problem("the router closed an HTTP connection");
      return false;
    }
    std::string why;
    auto res = http_response(c, why);
    if (!res) {
      out.problem("HTTP: " + why);
      return false;
    }
    const int status = res->result_int();
    if (status == 200 && stream) {
      check_stream(stream_text(res->body()), i, "HTTP");
    } else if (status == 200) {
      const json doc = json::parse(res->body(), nullptr, false);
      if (doc.is_discarded() || doc["choices"][0].value("text", "") != refs_[i].text)
        out.problem("HTTP: prompt " + std::to_string(i) + " answered " + res->body());
      else
        ++out.answered;
    } else if (status == 503) {
      ++out.unrouted;
    } else if (status == 429) {
      ++out.refused;
    } else {
      out.problem("HTTP: status " + std::to_string(status) + ": " + res->body());
    }
    return res->keep_alive();
  }

  const std::vector<Reference>& refs_;
  std::string socket_;
  Clock::time_point end_;
};

// /proc's view of a process: its open descriptors and resident memory.
int open_fds(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}
long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return std::atol(line.c_str() + 6);
  return -1;
}

TEST(RouterStressTest, ManyClientsAndDaemonsKilledInALoopLoseNothingThatHadNotStreamed) {
  std::vector<std::unique_ptr<Daemon>> daemons, dead;
  std::vector<std::string> sockets;
  for (int d = 0; d < kDaemons; ++d) {
    daemons.push_back(std::make_unique<Daemon>());
    ASSERT_TRUE(daemons.back()->wait_ready()) << daemons.back()->log();
    sockets.push_back(daemons.back()->socket_path());
  }
  // What a live daemon gives each request, over both of its front doors.
  std::vector<Reference> refs(kPrompts.size());
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    auto c = daemons[0]->connect();
    auto r = c->call(request(1, "generate", rpc_params(i, false)));
    ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
    refs[i].tokens = (*r)["result"]["tokens"].get<std::vector<int>>();
    auto web = daemons[0]->connect();
    ASSERT_TRUE(web->send_raw(http_post(http_body(i, false))));
    std::string why;
    auto res = http_response(*web, why);
    ASSERT_TRUE(res && res->result_int() == 200) << why;
    refs[i].text = json::parse(res->body())["choices"][0]["text"];
  }

  RouterProcess router(sockets, {"--max-line-bytes", std::to_string(kMaxLineBytes),
                                 "--http-timeout", "5", "--log-level", "error"});
  for (int d = 0; d < kDaemons; ++d) ASSERT_TRUE(router.wait_usable(d, true)) << router.log();
  const pid_t pid = router.pid();
  const double seconds = stress_seconds();
  // Before any client: its listener, its daemon links, the event loop's own.
  const int fds_before = open_fds(pid);
  {  // a first request, so what the router makes once is made
    Client c(router.socket_path());
    auto r = c.call(request(1, "generate", rpc_params(0, true)));
    ASSERT_TRUE(r && r->contains("result")) << router.log();
  }
  const long rss_before = rss_kib(pid);

  // Held from start to end: idle JSON-RPC connections, and HTTP requests
  // that never finish (the router ends those after --http-timeout).
  std::vector<std::unique_ptr<Client>> idle, slow_http;
  for (int k = 0; k < 8; ++k) idle.push_back(router.connect());
  for (int k = 0; k < 2; ++k) {
    slow_http.push_back(router.connect());
    slow_http.back()->send_raw(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n");
  }

  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  Stress stress(refs, router.socket_path(), end);
  std::vector<std::thread> clients;
  for (unsigned k = 0; k < 3; ++k) clients.emplace_back([&, k] { stress.rpc_caller(100 + k); });
  for (unsigned k = 0; k < 2; ++k) clients.emplace_back([&, k] { stress.http_caller(200 + k); });
  for (unsigned k = 0; k < 2; ++k) clients.emplace_back([&, k] { stress.leaver(300 + k); });
  clients.emplace_back([&] { stress.slow_reader(400); });
  clients.emplace_back([&] { stress.oversized(); });

  // The chaos, on this thread.
  int kills = 0;
  for (int next = 0; Clock::now() + 2s < end; next = (next + 1) % kDaemons) {
    std::this_thread::sleep_for(1500ms);
    ASSERT_EQ(::kill(daemons[next]->pid(), SIGKILL), 0);
    ++kills;
    ASSERT_TRUE(daemons[next]->wait_exit().has_value());
    dead.push_back(std::move(daemons[next]));  // its folder holds the socket path
    daemons[next] = std::make_unique<Daemon>(std::vector<std::string>{"--socket", sockets[next]});
    ASSERT_TRUE(daemons[next]->wait_ready()) << daemons[next]->log();
    ASSERT_TRUE(router.wait_usable(next, true)) << router.log();
  }
  for (auto& t : clients) t.join();

  Outcomes& o = stress.out;
  for (auto& c : idle) {
    auto r = c->call(request(1, "health"));
    if (r && r->contains("result")) ++o.idle_answered;
  }
  EXPECT_EQ(o.idle_answered.load(), static_cast<long>(idle.size()))
      << "idle connections were dropped";
  if (seconds > 5) {
    for (auto& c : slow_http) {
      std::string seen;
      while (auto more = c->read_raw(kTimeout)) seen += *more;
      EXPECT_TRUE(seen.starts_with("HTTP/1.1 408")) << "a request that never finished: " << seen;
    }
  }
  idle.clear();
  slow_http.clear();

  // The router holds nothing, and its descriptors are back where they were.
  const auto deadline = Clock::now() + kTimeout;
  json fleet;
  int fds_after = -1;
  while (Clock::now() < deadline) {
    fleet = router.fleet();
    bool idle_now = fleet.is_object() && fleet["requests"] == 0;
    for (const json& d : fleet["daemons"]) idle_now = idle_now && d["pending"] == 0;
    fds_after = open_fds(pid);
    if (idle_now && fds_after == fds_before) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(fleet["requests"], 0) << fleet.dump();
  for (const json& d : fleet["daemons"]) EXPECT_EQ(d["pending"], 0) << fleet.dump();
  EXPECT_EQ(fds_after, fds_before) << "the router's open descriptors";
  const long rss_after = rss_kib(pid);

  std::printf(
      "router stress, %.0f s, %d daemon kills: %ld answered whole, %ld ended with an error after "
      "streaming, %ld unrouted (no daemon usable), %ld refused, %ld clients left mid-way, %ld "
      "over-long inputs refused, %ld slow streams; router fds %d -> %d, RSS %ld -> %ld KiB\n",
      seconds, kills, o.answered.load(), o.streamed_then_lost.load(), o.unrouted.load(),
      o.refused.load(), o.left.load(), o.oversized.load(), o.slow_ended.load(), fds_before,
      fds_after, rss_before, rss_after);
  for (const std::string& p : o.problems) ADD_FAILURE() << p;
  EXPECT_GT(o.answered.load(), 0);
  EXPECT_GT(o.left.load(), 0);

  Client stop(router.socket_path());
  auto r = stop.call(request(1, "shutdown"));
  ASSERT_TRUE(r && r->contains("result"));
  const auto status = router.exit_status(kTimeout);
  ASSERT_TRUE(status.has_value()) << router.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "wait status " << *status << "\n"
                                                               << router.log();
}

}  // namespace
}  // namespace kvtier::daemon_test

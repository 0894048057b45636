// kvtier-router against daemons that misbehave or refuse: events lost, a
// line cut short, a stream that keeps breaking, another model's
// fingerprint, a daemon full or draining. The real kvtierd never does the
// first ones and cannot be made to refuse on cue, so that daemon is a
// script on a Unix socket; the router (and, where one is needed, the other
// daemon) are the real ones. Each fault must cost hits or a retry, never a
// route on stale blocks or a lost request, and a stream that keeps
// breaking takes the daemon out of use instead of a busy loop.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "daemon_test_util.h"
#include "router_test_util.h"
#include "tiers/block_key.h"

namespace kvtier::daemon_test {
namespace {

std::string key_hex(std::uint64_t n) { return tiers::to_hex({n, n}); }

// A daemon that answers the router's control calls from a script: health
// (the bundled model's shapes, page size 16), tiers (a prefill so cheap
// that the router prefers it to any real daemon), stats, and
// cache.subscribe with the next of `snapshots` (the last one again once
// they run out), held back while hold_subscribe is set. send() writes a
// raw line to the connection open now.
class ScriptedDaemon {
 public:
  ScriptedDaemon(const std::filesystem::path& dir, std::string fingerprint,
                 std::vector<std::vector<std::string>> snapshots)
      : path_((dir / ("scripted-" + fingerprint + ".sock")).string()),
        fingerprint_(std::move(fingerprint)),
        snapshots_(std::move(snapshots)) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_fd_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedDaemon() {
    stop_ = true;
    thread_.join();
    for (const Conn& c : conns_) ::close(c.fd);
    ::close(listen_fd_);
  }

  const std::string& path() const { return path_; }
  // A raw line to the connection that subscribed last.
  void send(std::string line) {
    std::lock_guard lock(mu_);
    outbox_.push_back(std::move(line) + "\n");
  }
  std::atomic<bool> hold_subscribe{false};
  // The error every other call (generate) gets.
  std::atomic<int> refuse_with{-32601};
  std::atomic<int> subscriptions{0};
  // What `stats` answers from now on.
  void set_stats(json stats) {
    std::lock_guard lock(mu_);
    stats_ = std::move(stats);
  }

 private:
  struct Conn {
    int fd;
    std::string buf;
  };

  void serve() {
    while (!stop_) {
      std::vector<pollfd> p = {{listen_fd_, POLLIN, 0}};
      for (const Conn& c : conns_) p.push_back({c.fd, POLLIN, 0});
      ::poll(p.data(), p.size(), 10);
      for (std::size_t i = conns_.size(); i-- > 0;) {
        if (!(p[i + 1].revents & (POLLIN | POLLHUP))) continue;
        char chunk[4096];
        const ssize_t n = ::recv(conns_[i].fd, chunk, sizeof chunk, 0);
        if (n <= 0) {
          if (conns_[i].fd == subscriber_) subscriber_ = -1;
          ::close(conns_[i].fd);
          conns_.erase(conns_.begin() + static_cast<long>(i));
          continue;
        }
        conns_[i].buf.append(chunk, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = conns_[i].buf.find('\n')) != std::string::npos;) {
          answer(conns_[i].fd, json::parse(conns_[i].buf.substr(0, nl)));
          conns_[i].buf.erase(0, nl + 1);
        }
      }
      if (p[0].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) conns_.push_back({fd, ""});
      }
      if (!pending_subscribe_.is_null() && !hold_subscribe) {
        write(subscriber_, pending_subscribe_.dump() + "\n");
        pending_subscribe_ = json();
        ++subscriptions;
      }
      std::deque<std::string> out;
      {
        std::lock_guard lock(mu_);
        out.swap(outbox_);
      }
      for (const auto& line : out) write(subscriber_, line);
    }
  }

  void answer(int fd, const json& call) {
    const std::string method = call.value("method", "");
    json result;
    if (method == "health") {
      result = {{"status", "ok"},
                {"model",
                 {{"n_layer", 4},
                  {"n_head", 4},
                  {"n_embd", 128},
                  {"vocab_size", 96},
                  {"block_size", 256}}},
                {"config", {{"page_size", 16}}}};
    } else if (method == "tiers") {
      result = {{"costs", {{"prefill", {{{"rows", 16}, {"pass_us", 0.001}}}}}}};
    } else if (method == "stats") {
      std::lock_guard lock(mu_);
      result = stats_;
    } else if (method == "cache.subscribe") {
      const auto& keys = snapshots_[std::min<std::size_t>(next_snapshot_++, snapshots_.size() - 1)];
      json blocks = json::array();
      for (const auto& k : keys) blocks.push_back({{"block", k}, {"tier", "l1"}});
      const std::uint64_t seq = 10 * next_snapshot_;
      subscriber_ = fd;
      pending_subscribe_ = {
          {"jsonrpc", "2.0"},
          {"id", call["id"]},
          {"result",
           {{"seq", seq}, {"fingerprint", fingerprint_}, {"page_size", 16}, {"blocks", blocks}}}};
      return;
    } else {
      write(fd, json{{"jsonrpc", "2.0"},
                     {"id", call["id"]},
                     {"error", {{"code", refuse_with.load()}, {"message", "scripted refusal"}}}}
                        .dump() +
                    "\n");
      return;
    }
    write(fd, json{{"jsonrpc", "2.0"}, {"id", call["id"]}, {"result", result}}.dump() + "\n");
  }

  static void write(int fd, const std::string& bytes) {
    if (fd >= 0) (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  std::string path_, fingerprint_;
  std::vector<std::vector<std::string>> snapshots_;
  std::size_t next_snapshot_ = 0;
  int listen_fd_ = -1;
  std::vector<Conn> conns_;
  int subscriber_ = -1;  // the connection that subscribed last
  json pending_subscribe_;
  std::mutex mu_;
  std::deque<std::string> outbox_;
  json stats_ = {{"pending", 0}};  // under mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

json events(std::uint64_t seq, const std::vector<std::string>& stored) {
  json e = json::array();
  for (const auto& k : stored) e.push_back({{"block", k}, {"tier", "l1"}, {"stored", true}});
  return {
      {"jsonrpc", "2.0"}, {"method", "cache.events"}, {"params", {{"seq", seq}, {"events", e}}}};
}

int l1_blocks(const json& d) { return d["blocks"]["l1"].get<int>(); }

TEST(RouterFaultsTest, LostOrGarbledEventsCostASnapshotAndAStreamThatKeepsBreakingIsTakenOut) {
  test_util::TempDir dir;
  ScriptedDaemon daemon(dir.path(), "00000000000000aa",
                        {{key_hex(1)}, {key_hex(1), key_hex(2), key_hex(3)}, {key_hex(7)}});
  RouterProcess router({daemon.path()});
  router.wait_for(0, [](const json& d) { return d["usable"] == true && l1_blocks(d) == 1; });

  // Seq 10 was the snapshot: 11 follows, and is applied.
  daemon.send(events(11, {key_hex(2)}).dump());
  router.wait_for(0, [](const json& d) { return l1_blocks(d) == 2; });

  // 13 after 11: a batch was lost. A fresh snapshot (three blocks) replaces
  // the index; the daemon stayed usable throughout.
  daemon.send(events(13, {key_hex(4)}).dump());
  json d = router.wait_for(0, [](const json& d) { return l1_blocks(d) == 3; });
  EXPECT_EQ(d["resyncs"], 1);
  EXPECT_EQ(d["downs"], 0);
  EXPECT_EQ(d["usable"], true);

  // A line cut short, more than a second later: one more snapshot.
  std::this_thread::sleep_for(1100ms);
  daemon.send(R"({"jsonrpc":"2.0","method":"cache.events","params":{"seq":31,"ev)");
  d = router.wait_for(0, [](const json& d) { return d["resyncs"] == 2 && l1_blocks(d) == 1; });
  EXPECT_EQ(d["downs"], 0);

  // Broken again at once: out of use (then tried again, and back).
  const int subscribed = daemon.subscriptions;
  daemon.send("{not json");
  d = router.wait_for(0, [](const json& d) { return d["downs"] == 1; });
  d = router.wait_for(0, [&](const json& d) { return d["usable"] == true; });
  EXPECT_GT(daemon.subscriptions, subscribed);
}

// A daemon's load is what its `stats` count: a count that is not an
// integer >= 0 takes it out (it is not weighed by a guess), until its
// stats make sense again; `backlog_rows` may be missing (an older daemon).
TEST(RouterFaultsTest, StatsThatAreNotCountsTakeADaemonOutUntilTheyAre) {
  test_util::TempDir dir;
  ScriptedDaemon daemon(dir.path(), "00000000000000aa", {{key_hex(1)}});
  RouterProcess router({daemon.path()});
  json d = router.wait_for(0, [](const json& d) { return d["usable"] == true; });
  EXPECT_EQ(d["backlog_rows"], 0);

  daemon.set_stats({{"pending", 0}, {"backlog_rows", "many"}});
  d = router.wait_for(0, [](const json& d) { return d["usable"] == false; });
  EXPECT_TRUE(test_util::contains(d["last_error"].get<std::string>(), "'backlog_rows'"))
      << d.dump();

  daemon.set_stats({{"pending", -1}, {"backlog_rows", 3}});
  d = router.wait_for(0, [](const json& d) {
    return test_util::contains(d["last_error"].get<std::string>(), "'pending'");
  });
  EXPECT_EQ(d["usable"], false);

  daemon.set_stats({{"pending", 2}, {"backlog_rows", 40}});
  router.wait_for(0, [](const json& d) {
    return d["usable"] == true && d["pending"] == 2 && d["backlog_rows"] == 40;
  });
}

TEST(RouterFaultsTest, ADaemonOfAnotherFingerprintIsNotUsed) {
  test_util::TempDir dir;
  ScriptedDaemon first(dir.path(), "00000000000000aa", {{key_hex(1)}});
  ScriptedDaemon other(dir.path(), "00000000000000bb", {{key_hex(1)}});
  other.hold_subscribe = true;  // the first sets the fleet's fingerprint
  RouterProcess router({first.path(), other.path()});
  router.wait_for(0, [](const json& d) { return d["usable"] == true; });
  other.hold_subscribe = false;
  const json d = router.wait_for(1, [](const json& d) {
    return test_util::contains(d["last_error"].get<std::string>(), "fingerprint");
  });
  EXPECT_EQ(d["usable"], false);
  EXPECT_EQ(l1_blocks(d), 0);
}

// A daemon that is full (-32000) or draining (-32002) refuses for now: the
// request goes to another, and only when none takes it does the refusal
// come back.
TEST(RouterFaultsTest, ARequestRefusedForNowIsSentToAnotherDaemon) {
  test_util::TempDir dir;
  Daemon real;
  ASSERT_TRUE(real.wait_ready()) << real.log();
  auto c = real.connect();
  auto snapshot = c->call(request(1, "cache.subscribe"));
  ASSERT_TRUE(snapshot && snapshot->contains("result"));
  // The real daemon's fingerprint, so both are of the fleet; the scripted
  // one's prefill is the cheaper, so every request goes to it first.
  ScriptedDaemon full(dir.path(), (*snapshot)["result"]["fingerprint"], {{}});
  full.refuse_with = -32000;
  RouterProcess router({full.path(), real.socket_path()});
  router.wait_for(0, [](const json& d) { return d["usable"] == true; });
  router.wait_for(1, [](const json& d) { return d["usable"] == true; });

  Client via(router.socket_path());
  const json params = {{"prompt", "Q: What is a towel for?"}, {"max_tokens", 4}, {"seed", 1}};
  auto r = via.call(request(2, "generate", params));
  ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  EXPECT_EQ(router.fleet()["choices"]["retried"], 1);

  // Draining refuses too; with the real daemon gone, the refusal itself
  // comes back.
  full.refuse_with = -32002;
  ASSERT_EQ(::kill(real.pid(), SIGKILL), 0);
  router.wait_for(1, [](const json& d) { return d["usable"] == false; });
  r = via.call(request(3, "generate", params));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["error"]["code"], -32002) << r->dump();
  EXPECT_EQ((*r)["error"]["message"], "scripted refusal");
}

}  // namespace
}  // namespace kvtier::daemon_test

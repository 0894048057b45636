// A stand-in kvtierd on a Unix socket, for the router's tests of faults a
// real daemon never makes or cannot be made to make on cue
// (router_faults_test.cpp, client_leaves_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::daemon_test {

using nlohmann::json;

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
        if (std::isupper(static_cast<unsigned char>(conns_[i].buf[0]))) {  // HTTP
          if (!http_request_whole(conns_[i].buf)) continue;
          write(conns_[i].fd, http_refusal());
          ::close(conns_[i].fd);
          conns_.erase(conns_.begin() + static_cast<long>(i));
          continue;
        }
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

  // Whether `buf` holds an HTTP request's header and the body its
  // Content-Length announces.
  static bool http_request_whole(const std::string& buf) {
    const std::size_t end = buf.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    std::string head = buf.substr(0, end);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::size_t length = 0;
    if (const std::size_t at = head.find("content-length:"); at != std::string::npos)
      length = std::strtoul(head.c_str() + at + 15, nullptr, 10);
    return buf.size() >= end + 4 + length;
  }

  // refuse_with as kvtierd's HTTP front door says it: 429 full, 503
  // draining, 404 otherwise.
  std::string http_refusal() const {
    const int code = refuse_with.load();
    const int status = code == -32000 ? 429 : code == -32002 ? 503 : 404;
    const std::string body =
        json{{"error", {{"message", "scripted refusal"}, {"type", "server_error"}}}}.dump();
    return "HTTP/1.1 " + std::to_string(status) + " Refused\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
           body;
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

}  // namespace kvtier::daemon_test

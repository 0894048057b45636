// The one entry point through which the libFuzzer target (router_fuzz.cpp)
// and the corpus test (tests/router_fuzz_corpus_test.cpp) drive
// kvtier-router's two front doors as a client would: the real RouterServer
// on a Unix socket in a fresh folder, in front of two stand-in daemons
// (stand_in_daemon.h) on the same io_context, all run by the calling
// thread until nothing is left to run. The daemons refuse some requests as
// full (a max_tokens that is a multiple of 3 on one, of 5 on the other), so
// retries and refusals run too.
//
// An input is what one client sends on a fresh connection: JSON-RPC lines,
// or HTTP requests (told by the first byte, as the router tells them). A
// JSON-RPC client then sends one more call (`health`, after a newline),
// which must be answered; then every client leaves (it shuts its side,
// then closes). An input whose last byte is kLeaveEarly (not sent) leaves
// as soon as the rest is written, while its requests are still on their
// way to the daemons or back: the client that once killed the router. What
// must hold whatever the input (a broken property aborts, which libFuzzer
// and the test both report):
//  - nothing crashes, hangs, leaks or trips the build's sanitizers;
//  - JSON-RPC: the router reads everything and closes the connection only
//    once the client has left; every line back is one JSON-RPC 2.0 object:
//    a result, an error with an integer code and a string message, or a
//    notification;
//  - HTTP: what comes back is whole HTTP/1.1 responses (the last may be
//    cut short by a client that left early), none a 500, each JSON body
//    valid JSON; the connection is closed once the client left;
//  - once the client has left: no connection open, no request in flight
//    (the router's own ids and each daemon's count), and no daemon
//    connection left that carried the client's calls.
//
// Thread-safety: none; one harness per process (it holds a RouterServer).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "fuzz/stand_in_daemon.h"
#include "router/daemon_address.h"
#include "router/router.h"
#include "router/router_server.h"
#include "wire/chat_template.h"
#include "wire/http/connection.h"
#include "wire/http/openai.h"
#include "wire/log.h"

namespace kvtier::router {

inline void router_fuzz_require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "router_fuzz: property broken: %s\n", what);
  std::abort();
}

class RouterFuzz {
 public:
  // The call a JSON-RPC client sends after its input.
  static constexpr std::string_view kLastCall =
      "\n{\"jsonrpc\":\"2.0\",\"id\":\"router-fuzz-last\",\"method\":\"health\"}\n";
  // An input's last byte that says: leave right after sending (EOT).
  static constexpr char kLeaveEarly = '\x04';

  explicit RouterFuzz(const std::filesystem::path& model_dir) {
    wire::log_level_set(wire::LogLevel::kError);
    char dir[] = "/tmp/kvtier-router-fuzz-XXXXXX";
    router_fuzz_require(::mkdtemp(dir) != nullptr, "a temporary folder");
    dir_ = dir;
    auto config = ModelConfig::load(model_dir / "config.json");
    router_fuzz_require(config.has_value(), "the model's config loads");
    auto tokenizer = Tokenizer::load(config->tokenizer);
    router_fuzz_require(tokenizer.has_value(), "the model's tokenizer loads");
    auto chat = wire::ChatTemplate::load(model_dir.string(), config->tokenizer);
    router_fuzz_require(chat.has_value(), "the model's chat template loads");
    std::vector<DaemonAddress> addresses;
    int refuse_every = 3;
    for (const char* name : {"a.sock", "b.sock"}) {
      const std::string path = (dir_ / name).string();
      daemons_.push_back(std::make_unique<StandInDaemon>(io_, path, *config, refuse_every));
      refuse_every += 2;
      auto address = daemon_address_parse(path, "");
      router_fuzz_require(address.has_value(), "a stand-in's address parses");
      addresses.push_back(std::move(*address));
    }
    router_ = std::make_unique<Router>(io_, std::move(addresses), *config, std::move(*tokenizer),
                                       std::move(*chat));
    RouterServerOptions o;
    o.socket_path = (dir_ / "router.sock").string();
    o.http.served_model = wire::http::served_model_name(model_dir.string());
    o.http.max_body_bytes = o.session.max_line_bytes;
    o.session.router_uid = ::geteuid();
    socket_path_ = o.socket_path;
    server_ = std::make_unique<RouterServer>(io_, *router_, std::move(o));
    router_fuzz_require(server_->listen().has_value(), "the router listens");
    server_->start();
    router_->on_shutdown = [] {};  // `shutdown` is answered; the harness goes on
    wait_usable();
  }

  ~RouterFuzz() {
    // Everything stops first, and its handlers run while it is still
    // there (each captures its owner); only then does it go.
    server_->stop();  // no request is left: it stops at once
    for (const auto& d : daemons_) d->close();
    settle();
    server_.reset();
    router_.reset();
    daemons_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  RouterFuzz(const RouterFuzz&) = delete;
  RouterFuzz& operator=(const RouterFuzz&) = delete;

  void one(std::string_view input) {
    wait_usable();
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    router_fuzz_require(fd >= 0, "a client socket");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path_.c_str(), sizeof(addr.sun_path) - 1);
    router_fuzz_require(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
                        "the client connects");
    const bool early = !input.empty() && input.back() == kLeaveEarly;
    if (early) input.remove_suffix(1);
    const bool http = !input.empty() && wire::http::starts_http(static_cast<char>(input.front()));
    Client c{fd, {}, false};
    const bool sent = pump(c, input, early);
    if (!http && !early) {
      router_fuzz_require(sent, "the router reads everything a JSON-RPC client sends");
      router_fuzz_require(pump(c, kLastCall) && !c.eof,
                          "a JSON-RPC connection stays open while its client is there");
    }
    ::shutdown(fd, SHUT_WR);  // the client leaves (again, when early)
    pump(c, "");
    router_fuzz_require(c.eof, "the router closes a connection whose client left");
    ::close(fd);
    settle();
    if (http)
      check_http(c.out, early);
    else
      check_json_rpc(c.out, early);
    router_fuzz_require(server_->connections() == 0, "no client connection is left open");
    router_fuzz_require(router_->in_flight() == 0, "no request is left on a daemon");
    router_fuzz_require(router_->fleet()["requests"] == 0, "no router request id is left");
    for (const auto& d : daemons_)
      router_fuzz_require(d->request_connections() == 0,
                          "no daemon connection that carried the client's calls is left open");
  }

 private:
  struct Client {
    int fd;
    std::string out;  // what the router sent
    bool eof;         // and then it closed
  };

  // Runs what is ready until nothing is.
  void settle() {
    for (int idle = 0; idle < 2;) idle = io_.poll() > 0 ? 0 : idle + 1;
  }

  // The stand-ins are in use again (a link not asked for a while may have
  // timed out between inputs); at most 5 s.
  void wait_usable() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(router_->link(0).usable() && router_->link(1).usable())) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::fprintf(stderr, "router_fuzz: %s\n", router_->fleet().dump().c_str());
        router_fuzz_require(false, "the stand-in daemons are in use within 5 s");
      }
      io_.run_one_for(std::chrono::milliseconds(10));
    }
  }

  // Writes `bytes`, reading what comes back, and runs the router and the
  // daemons until nothing moves; with `leave`, shuts the client's side as
  // soon as the last byte is written. False when not everything could be
  // written (the router stopped reading, or closed).
  bool pump(Client& c, std::string_view bytes, bool leave = false) {
    std::size_t at = 0;
    bool writable = true;
    std::array<char, 65536> buf;
    for (int idle = 0; idle < 2;) {
      bool moved = false;
      if (writable && at < bytes.size()) {
        const ssize_t n = ::send(c.fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (n > 0) {
          at += static_cast<std::size_t>(n);
          moved = true;
          if (leave && at == bytes.size()) ::shutdown(c.fd, SHUT_WR);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          writable = false;  // the router closed its side
        }
      }
      for (;;) {
        const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), 0);
        if (n > 0) {
          c.out.append(buf.data(), static_cast<std::size_t>(n));
          moved = true;
          continue;
        }
        if (n == 0) c.eof = true;
        break;
      }
      if (io_.poll() > 0) moved = true;
      idle = moved ? 0 : idle + 1;
    }
    return at == bytes.size();
  }

  static void check_json_rpc(const std::string& out, bool early) {
    router_fuzz_require(out.empty() || out.back() == '\n', "the router writes whole lines");
    bool last_answered = false;
    for (std::size_t from = 0, nl; (nl = out.find('\n', from)) != std::string::npos;
         from = nl + 1) {
      const auto msg = nlohmann::json::parse(out.substr(from, nl - from), nullptr, false);
      router_fuzz_require(msg.is_object(), "each line is a JSON object");
      router_fuzz_require(msg.value("jsonrpc", "") == "2.0", "each line is JSON-RPC 2.0");
      const bool result = msg.contains("result"), error = msg.contains("error");
      const bool note = msg.contains("method") && !msg.contains("id");
      router_fuzz_require(result + error + note == 1,
                          "each line is a result, an error or a notification");
      if (error) {
        const auto& e = msg["error"];
        router_fuzz_require(e.is_object() && e.contains("code") && e["code"].is_number_integer() &&
                                e.contains("message") && e["message"].is_string(),
                            "an error has an integer code and a string message");
      }
      if (result && msg["id"] == "router-fuzz-last") last_answered = true;
    }
    router_fuzz_require(early || last_answered, "the call after the input is answered");
  }

  static void check_http(const std::string& out, bool early) {
    namespace bhttp = boost::beast::http;
    std::string_view rest = out;
    while (!rest.empty()) {
      bhttp::response_parser<bhttp::string_body> parser;
      parser.eager(true);
      parser.body_limit(64 << 20);
      boost::system::error_code ec;
      std::size_t used = 0;
      while (!ec && !parser.is_done() && used < rest.size())
        used += parser.put(boost::asio::buffer(rest.data() + used, rest.size() - used), ec);
      if (early && (!ec || ec == bhttp::error::need_more) && !parser.is_done()) return;  // cut
      router_fuzz_require(!ec && parser.is_done(), "the router sends whole HTTP responses");
      const auto& res = parser.get();
      const unsigned status = res.result_int();
      router_fuzz_require(status >= 100 && status <= 599 && status != 500,
                          "each status is one the API uses, none a 500");
      if (res[bhttp::field::content_type].starts_with("application/json"))
        router_fuzz_require(!nlohmann::json::parse(res.body(), nullptr, false).is_discarded(),
                            "a JSON body is valid JSON");
      rest.remove_prefix(used);
    }
  }

  boost::asio::io_context io_{1};
  std::filesystem::path dir_;
  std::string socket_path_;
  std::vector<std::unique_ptr<StandInDaemon>> daemons_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<RouterServer> server_;
};

}  // namespace kvtier::router

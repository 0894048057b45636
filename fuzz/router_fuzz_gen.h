// A structure-aware generator of what a client sends kvtier-router: what
// the router fuzz target's custom mutator (router_fuzz.cpp) writes, and
// what the corpus test replays from fixed seeds
// (tests/router_fuzz_corpus_test.cpp).
//
// Half JSON-RPC, half HTTP, shaped like real clients' traffic so that the
// router's own paths run, not just its parsers' refusals: calls of every
// method the router answers or forwards, with plausible and wrong params
// (streamed generates, cancels of the ids the router hands out, fleet.route,
// shutdown), several on one connection; and pipelined HTTP requests to
// every route and some that do not exist, with bodies of completion and
// chat requests, chunked or with a Content-Length right or wrong, 100
// Continue, keep-alive or close. Small max_tokens make the stand-in daemons
// refuse some (router_fuzz_one.h). A third of the clients leave as soon as
// they have sent (RouterFuzz::kLeaveEarly). Deep nesting is
// protocol_fuzz_gen.h's.
//
// Thread-safety: none; one generator per thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz/protocol_fuzz_gen.h"
#include "fuzz/router_fuzz_one.h"

namespace kvtier::router {

class RouterFuzzGen {
 public:
  RouterFuzzGen(std::uint64_t seed, std::size_t max_bytes) : rng_(seed), max_bytes_(max_bytes) {}

  // One client's bytes.
  std::string input() {
    std::string out = rng_.one_in(2) ? rpc_calls() : http_requests();
    if (out.size() + 1 > max_bytes_) out.resize(max_bytes_ > 0 ? max_bytes_ - 1 : 0);
    if (rng_.one_in(3)) out += RouterFuzz::kLeaveEarly;  // the client leaves at once
    return out;
  }

 private:
  using json = nlohmann::json;

  // clang-format off
  static constexpr std::array<std::string_view, 12> kMethods = {
      "generate", "generate", "generate", "cache.lookup", "cache.warm", "cancel",
      "health", "fleet", "fleet.route", "help", "auth", "shutdown"};
  static constexpr std::array<std::string_view, 9> kPaths = {
      "/v1/completions", "/v1/completions", "/v1/chat/completions", "/v1/chat/completions",
      "/v1/models", "/health", "/metrics", "/", "/v1/completions?stream=1"};
  static constexpr std::array<std::string_view, 6> kHttpMethods = {
      "POST", "POST", "GET", "HEAD", "PUT", "OPTIONS"};
  static constexpr std::array<std::string_view, 8> kTexts = {
      "Q: Why?\nA:", "", "a", "\u00e9t\u00e9 \u2603", "<|endoftext|>", "\t\r\n\\\"",
      "The quick brown fox jumps over the lazy dog. ", "\x7f"};
  // clang-format on

  // Something of a wrong type, or at an edge.
  json junk() {
    switch (rng_.below(8)) {
      case 0:
        return nullptr;
      case 1:
        return json::array();
      case 2:
        return json::object();
      case 3:
        return -1;
      case 4:
        return 1e308;
      case 5:
        return std::string(rng_.log_uniform(5000), 'x');
      case 6:
        return true;
      default:
        return "?";
    }
  }

  std::string text() {
    std::string t(kTexts[rng_.below(kTexts.size())]);
    for (std::size_t n = rng_.below(4); n > 0; --n) t += kTexts[rng_.below(kTexts.size())];
    if (rng_.one_in(16)) t = std::string(rng_.log_uniform(300), 'z');
    return t;
  }

  json tokens() {
    json t = json::array();
    for (std::size_t n = rng_.below(40); n > 0; --n)
      t.push_back(rng_.one_in(20) ? static_cast<long long>(rng_.next() % 1000) - 100
                                  : static_cast<long long>(rng_.below(96)));
    return t;
  }

  // Sampling and the rest, as both doors take them (most often right).
  void sampling(json& p) {
    if (!rng_.one_in(4)) p["max_tokens"] = static_cast<int>(1 + rng_.below(8));
    if (rng_.one_in(2)) p["stream"] = rng_.one_in(2);
    if (rng_.one_in(3)) p["temperature"] = rng_.one_in(2) ? 0.0 : 0.8;
    if (rng_.one_in(4)) p["seed"] = rng_.below(1000);
    if (rng_.one_in(6)) p["n"] = static_cast<int>(1 + rng_.below(3));
    if (rng_.one_in(6)) p["cache_salt"] = text();
    if (rng_.one_in(8)) p["stop"] = json::array({text()});
    if (rng_.one_in(10)) p["top_p"] = 0.5;
    if (rng_.one_in(12)) p[rng_.one_in(2) ? "max_tokens" : "bogus"] = junk();
  }

  json rpc_params(std::string_view method) {
    json p = json::object();
    if (method == "generate" || method == "cache.lookup" || method == "cache.warm" ||
        method == "fleet.route") {
      if (rng_.one_in(4))
        p["tokens"] = tokens();
      else
        p["prompt"] = rng_.one_in(12) ? junk() : json(text());
      if (method == "generate") sampling(p);
      if (rng_.one_in(8)) p["cache_salt"] = text();
    } else if (method == "cancel") {
      p["id"] = rng_.one_in(8) ? junk() : json(1 + rng_.below(4));
    } else if (method == "auth") {
      p["key"] = text();
    } else if (rng_.one_in(8)) {
      p["unexpected"] = junk();
    }
    return p;
  }

  std::string rpc_calls() {
    std::string out;
    for (std::size_t n = 1 + rng_.below(4); n > 0; --n) {
      if (rng_.one_in(10)) {  // one of the daemon protocol's own deep lines
        out += wire::ProtocolFuzzGen(rng_.next(), 4096).input();
        out += '\n';
        continue;
      }
      const std::string_view method = kMethods[rng_.below(kMethods.size())];
      json call = {{"jsonrpc", "2.0"}, {"method", method}};
      if (!rng_.one_in(8)) call["id"] = rng_.one_in(4) ? json(text()) : json(rng_.below(5));
      if (!rng_.one_in(10)) call["params"] = rpc_params(method);
      out += call.dump(-1, ' ', false, json::error_handler_t::replace);
      out += rng_.one_in(6) ? "\r\n" : "\n";
    }
    if (rng_.one_in(6)) out.pop_back();  // the last line cut short
    return out;
  }

  json messages() {
    static constexpr std::array<std::string_view, 5> kRoles = {"system", "user", "assistant",
                                                               "user", "tool"};
    json m = json::array();
    for (std::size_t n = 1 + rng_.below(4); n > 0; --n) {
      json one = {{"role", kRoles[rng_.below(kRoles.size())]}, {"content", text()}};
      if (rng_.one_in(10)) one["content"] = junk();
      if (rng_.one_in(10)) one["content"] = json::array({{{"type", "text"}, {"text", text()}}});
      m.push_back(one);
    }
    return m;
  }

  std::string body(std::string_view path) {
    if (rng_.one_in(10)) return wire::ProtocolFuzzGen(rng_.next(), 4096).input();
    json b = json::object();
    if (rng_.one_in(2)) b["model"] = rng_.one_in(2) ? "fortunes-char" : "other";
    if (path.starts_with("/v1/chat")) {
      b["messages"] = rng_.one_in(12) ? junk() : messages();
    } else {
      switch (rng_.below(5)) {
        case 0:
          b["prompt"] = json::array({text(), text()});
          break;
        case 1:
          b["prompt"] = tokens();
          break;
        case 2:
          b["prompt"] = junk();
          break;
        default:
          b["prompt"] = text();
      }
      if (rng_.one_in(8)) b["echo"] = true;
      if (rng_.one_in(8)) b["logprobs"] = static_cast<int>(rng_.below(3));
    }
    sampling(b);
    return b.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  std::string chunked(const std::string& body) {
    std::string out;
    for (std::size_t at = 0; at < body.size();) {
      const std::size_t n = std::min(body.size() - at, 1 + rng_.below(64));
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", n);
      out += size + body.substr(at, n) + "\r\n";
      at += n;
    }
    return out + "0\r\n\r\n";
  }

  std::string http_requests() {
    std::string out;
    for (std::size_t n = 1 + rng_.below(3); n > 0; --n) {
      const std::string_view path = kPaths[rng_.below(kPaths.size())];
      const bool post = path.starts_with("/v1/c") ? !rng_.one_in(8) : rng_.one_in(8);
      const std::string_view method = post ? "POST" : kHttpMethods[rng_.below(kHttpMethods.size())];
      std::string req = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: x\r\n";
      if (rng_.one_in(6)) req += "Connection: close\r\n";
      if (rng_.one_in(8)) req += "Authorization: Bearer " + text() + "\r\n";
      if (rng_.one_in(10)) req += "Expect: 100-continue\r\n";
      if (rng_.one_in(12)) req += "X-Long: " + std::string(rng_.log_uniform(20000), 'h') + "\r\n";
      std::string b = post || rng_.one_in(8) ? body(path) : "";
      if (!b.empty() && !rng_.one_in(8)) req += "Content-Type: application/json\r\n";
      if (!b.empty() && rng_.one_in(5)) {
        req += "Transfer-Encoding: chunked\r\n\r\n" + chunked(b);
      } else {
        std::size_t length = b.size();
        if (rng_.one_in(12)) length = rng_.one_in(2) ? length / 2 : length + 10;
        if (!b.empty() || rng_.one_in(4))
          req += "Content-Length: " + std::to_string(length) + "\r\n";
        req += "\r\n" + b;
      }
      out += req;
    }
    if (rng_.one_in(8)) out.resize(rng_.below(out.size() + 1));  // cut short
    return out;
  }

  wire::ProtocolFuzzRng rng_;
  std::size_t max_bytes_;
};

}  // namespace kvtier::router

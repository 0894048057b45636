// A stand-in kvtierd for the router's fuzz harness (router_fuzz_one.h), on
// the harness's own io_context, so that one thread runs the router and its
// daemons and an input's effects settle when nothing is left to run.
//
// It answers enough of kvtierd's protocol for a DaemonLink to take it into
// use (health with the router's model, tiers, cache.subscribe with an
// empty snapshot, stats), and every call the router forwards, at once and
// from the request alone, so the router's upstream side (relaying answers
// and streams, retries on a refusal, cancels when a client leaves) runs
// under the fuzzer too:
//   JSON-RPC  generate: refused as full (-32000) when refuses(max_tokens),
//             else one generate.token notification when streamed, then
//             its result; cancel, cache.lookup, cache.warm: a result;
//             anything else -32601.
//   HTTP      (a connection whose first byte is upper-case) 429 when
//             refuses(max_tokens), else 200: an event stream of one event
//             and [DONE] when the body asks "stream": true, else a JSON
//             answer; then the connection closes, as kvtierd's answers to
//             the router (Connection: close) do.
// `request_connections()` counts the connections open now that carried a
// forwarded call (the links' control connections carry none): a client
// that has left must leave none behind.
//
// Thread-safety: the io_context's thread only.
#pragma once

#include <array>
#include <boost/asio.hpp>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "engine/cache/tier.h"
#include "engine/model/model_config.h"
#include "wire/line_framer.h"
#include "wire/write_queue.h"

namespace kvtier::router {

class StandInDaemon {
 public:
  // Listens on `path` (a Unix socket) for a model of `config`'s shape;
  // refuses a generation whose max_tokens is a multiple of `refuse_every`.
  StandInDaemon(boost::asio::io_context& io, const std::string& path, const ModelConfig& config,
                int refuse_every)
      : acceptor_(io, boost::asio::local::stream_protocol::endpoint(path)),
        health_(health(config)),
        refuse_every_(refuse_every) {
    accept();
  }

  int request_connections() const { return *request_connections_; }

  // Stops accepting; the owner then runs the io_context until the aborted
  // accept has run, before it destroys this.
  void close() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  }

 private:
  using Socket = boost::asio::local::stream_protocol::socket;
  using json = nlohmann::json;

  static json health(const ModelConfig& c) {
    return {{"status", "ok"},
            {"model",
             {{"n_layer", c.n_layer},
              {"n_head", c.n_head},
              {"n_kv_head", c.n_kv_head},
              {"n_embd", c.n_embd},
              {"vocab_size", c.vocab_size},
              {"block_size", c.block_size}}},
            {"config", {{"page_size", 16}}},
            {"device", "cpu"},
            {"threads", 1}};
  }

  // One connection: JSON-RPC lines, or one HTTP request.
  class Connection : public std::enable_shared_from_this<Connection> {
   public:
    Connection(Socket socket, const json& health, int refuse_every,
               std::shared_ptr<int> request_connections)
        : socket_(std::move(socket)),
          out_(socket_, 64 << 20),
          health_(health),
          refuse_every_(refuse_every),
          request_connections_(std::move(request_connections)) {}
    ~Connection() {
      if (carries_requests_) --*request_connections_;
    }

    void read() {
      socket_.async_read_some(
          boost::asio::buffer(buf_),
          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
            if (ec || self->closed_) return self->close();
            self->take(std::string_view(self->buf_.data(), n));
            if (!self->closed_) self->read();
          });
    }

   private:
    void take(std::string_view bytes) {
      if (first_ && !bytes.empty()) {
        first_ = false;
        http_ = std::isupper(static_cast<unsigned char>(bytes[0])) != 0;
      }
      if (http_) {
        request_ += bytes;
        return http_request();
      }
      for (auto& item : framer_.feed(bytes)) {
        if (item.too_long) return close();
        rpc(item.line);
      }
    }

    void carries_requests() {
      if (std::exchange(carries_requests_, true)) return;
      ++*request_connections_;
    }

    bool refuses(const json& params) const {
      const auto max_tokens = params.find("max_tokens");
      return max_tokens != params.end() && max_tokens->is_number_integer() &&
             max_tokens->get<long long>() % refuse_every_ == 0;
    }

    void send(std::string bytes) {
      if (closed_) return;
      if (!out_.push(std::move(bytes), shared_from_this(),
                     [self = shared_from_this()](boost::system::error_code ec) {
                       if (ec || self->close_when_written_) self->close();
                     }))
        close();
    }

    void rpc(const std::string& line) {
      const json call = json::parse(line, nullptr, false);
      if (!call.is_object() || !call.contains("id")) return;  // the router sends nothing else
      const json& id = call["id"];
      const std::string method = call.value("method", "");
      const json params = call.value("params", json::object());
      const auto answer = [&](const json& result) {
        send(json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}}.dump() + "\n");
      };
      if (method == "health") return answer(health_);
      if (method == "tiers")
        return answer({{"costs", {{"prefill", {{{"rows", 16}, {"pass_us", 100.0}}}}}}});
      if (method == "cache.subscribe")
        return answer({{"seq", 1},
                       {"fingerprint", "0123456789abcdef"},
                       {"page_size", 16},
                       {"blocks", json::array()}});
      if (method == "stats") return answer({{"pending", 0}, {"backlog_rows", 0}});
      carries_requests();
      json cached = json::object();
      for (const TierNames& t : kTierNames) cached[t.name] = 0;
      if (method == "generate") {
        if (refuses(params)) {
          return send(json{{"jsonrpc", "2.0"},
                           {"id", id},
                           {"error", {{"code", -32000}, {"message", "stand-in full"}}}}
                          .dump() +
                      "\n");
        }
        const std::uint64_t request = ++requests_;
        if (params.value("stream", false)) {
          send(json{{"jsonrpc", "2.0"},
                    {"method", "generate.token"},
                    {"params",
                     {{"id", request},
                      {"rpc_id", id},
                      {"sample", 0},
                      {"tokens", {1}},
                      {"text", "a"}}}}
                   .dump() +
               "\n");
        }
        return answer({{"id", request},
                       {"text", "a"},
                       {"tokens", {1}},
                       {"finish_reason", "length"},
                       {"cached_tokens", cached}});
      }
      if (method == "cancel") return answer({{"cancelled", params.value("id", json())}});
      if (method == "cache.lookup" || method == "cache.warm")
        return answer({{"cached_tokens", cached}});
      send(json{{"jsonrpc", "2.0"},
                {"id", id},
                {"error", {{"code", -32601}, {"message", "stand-in: no such method"}}}}
               .dump() +
           "\n");
    }

    // Answers once the request's head and the body its Content-Length
    // announces are in.
    void http_request() {
      const std::size_t head_end = request_.find("\r\n\r\n");
      if (head_end == std::string::npos) return;
      std::string head = request_.substr(0, head_end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::size_t length = 0;
      if (const std::size_t at = head.find("content-length:"); at != std::string::npos)
        length = std::strtoul(head.c_str() + at + 15, nullptr, 10);
      if (request_.size() < head_end + 4 + length) return;
      carries_requests();
      const json body = json::parse(request_.substr(head_end + 4, length), nullptr, false);
      const json params = body.is_object() ? body : json::object();
      close_when_written_ = true;
      if (refuses(params)) return send(whole(429, R"({"error":{"message":"stand-in full"}})"));
      const json usage = {{"prompt_tokens", 1},
                          {"completion_tokens", 1},
                          {"total_tokens", 2},
                          {"kvtier_cached_tokens", {{kTierNames[0].name, 0}}}};
      if (!params.value("stream", false))
        return send(whole(200, json{{"choices", {{{"text", "a"}}}}, {"usage", usage}}.dump()));
      std::string out =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
          "chunked\r\nConnection: close\r\n\r\n";
      for (const std::string& event :
           {"data: " + json{{"choices", {{{"text", "a"}}}}}.dump() + "\n\n",
            std::string("data: [DONE]\n\n")}) {
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", event.size());
        out += size + event + "\r\n";
      }
      send(out + "0\r\n\r\n");
    }

    static std::string whole(int status, const std::string& body) {
      return "HTTP/1.1 " + std::to_string(status) +
             " Stand-in\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    }

    void close() {
      if (closed_) return;
      closed_ = true;
      out_.clear();
      boost::system::error_code ignored;
      socket_.close(ignored);
    }

    Socket socket_;
    wire::WriteQueue<Socket> out_;
    json health_;
    int refuse_every_;
    std::shared_ptr<int> request_connections_;
    wire::LineFramer framer_{64 << 20};
    std::array<char, 16384> buf_{};
    std::string request_;
    std::uint64_t requests_ = 0;
    bool first_ = true, http_ = false;
    bool carries_requests_ = false;
    bool close_when_written_ = false;
    bool closed_ = false;
  };

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, Socket socket) {
      if (ec) return;  // the acceptor closed: the harness is going
      std::make_shared<Connection>(std::move(socket), health_, refuse_every_, request_connections_)
          ->read();
      accept();
    });
  }

  boost::asio::local::stream_protocol::acceptor acceptor_;
  json health_;
  int refuse_every_;
  std::shared_ptr<int> request_connections_ = std::make_shared<int>(0);
};

}  // namespace kvtier::router

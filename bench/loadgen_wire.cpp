#include "bench/loadgen_wire.h"

#include <boost/beast/http.hpp>
#include <optional>

namespace kvtier::bench {

namespace {

using nlohmann::json;
namespace bhttp = boost::beast::http;

double number_or(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// cached_tokens (JSON-RPC) or usage.kvtier_cached_tokens (HTTP) by tier:
// {"l1":..,"l2":..,"l3":..,"remote":..}, or [l1, l2, ...], or one total
// (counted as L1); zeros when absent.
TierCounts parse_cached(const json* it) {
  TierCounts out{};
  if (it == nullptr) return out;
  if (it->is_object()) {
    for (int t = 0; t < kNumTiers; ++t)
      if (auto v = it->find(kTierNames[t].name); v != it->end() && v->is_number())
        out[t] = v->get<int>();
  } else if (it->is_array()) {
    for (int t = 0; t < kNumTiers && t < static_cast<int>(it->size()); ++t)
      if ((*it)[t].is_number()) out[t] = (*it)[t].get<int>();
  } else if (it->is_number()) {
    out[0] = it->get<int>();
  }
  return out;
}

const json* member(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

class JsonRpcWire final : public Wire {
 public:
  std::string request(const RequestRecord& r) override {
    const WorkItem& w = r.item;
    const json params = {{"prompt", w.prompt},           {"max_tokens", w.max_tokens},
                         {"temperature", w.temperature}, {"seed", w.seed},
                         {"priority", w.priority},       {"stream", true}};
    return json{{"jsonrpc", "2.0"}, {"id", r.index}, {"method", "generate"}, {"params", params}}
               .dump() +
           "\n";
  }

  bool feed(std::string_view bytes, RequestRecord& r, double now_s) override {
    in_.append(bytes);
    for (std::size_t nl; (nl = in_.find('\n')) != std::string::npos;) {
      const std::string line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      if (on_line(line, r, now_s)) return true;
    }
    return false;
  }

 private:
  bool on_line(const std::string& line, RequestRecord& r, double now_s) {
    json msg = json::parse(line, nullptr, false);
    if (msg.is_discarded() || !msg.is_object()) return false;
    if (!msg.contains("id")) {  // generate.token for the one request on this connection
      if (r.first_token_s < 0) r.first_token_s = now_s;
      return false;
    }
    if (!msg["id"].is_number() || msg["id"].get<long>() != r.index) return false;
    if (auto err = msg.find("error"); err != msg.end()) {
      r.error = "error " + (err->contains("code") ? (*err)["code"].dump() : std::string("?")) +
                ": " + err->value("message", std::string());
    } else if (auto res = msg.find("result"); res != msg.end() && res->is_object()) {
      const json& result = *res;
      r.finish_reason = result.value("finish_reason", std::string());
      r.prompt_tokens = result.value("prompt_tokens", 0);
      r.completion_tokens = result.value("completion_tokens", 0);
      r.text = result.value("text", std::string());
      if (auto t = result.find("tokens"); t != result.end() && t->is_array())
        r.tokens = t->get<std::vector<int>>();
      if (auto t = result.find("timings"); t != result.end() && t->is_object()) {
        r.queue_ms = number_or(*t, "queue_ms", -1);
        r.daemon_ttft_ms = number_or(*t, "ttft_ms", -1);
        r.total_ms = number_or(*t, "total_ms", -1);
      }
      r.cached = parse_cached(member(result, "cached_tokens"));
      if (r.finish_reason == "cancelled") r.error = "cancelled by the daemon";
    } else {
      r.error = "response without result";
    }
    return true;
  }

  std::string in_;  // read past the last whole line
};

class HttpWire final : public Wire {
 public:
  std::string request(const RequestRecord& r) override {
    const WorkItem& w = r.item;
    const std::string body = json{{"prompt", w.prompt},
                                  {"max_tokens", w.max_tokens},
                                  {"temperature", w.temperature},
                                  {"seed", w.seed},
                                  {"priority", w.priority},
                                  {"stream", true},
                                  {"stream_options", {{"include_usage", true}}}}
                                 .dump();
    parser_.emplace();
    parser_->eager(true);
    parser_->body_limit(boost::none);
    seen_ = 0;
    return "POST /v1/completions HTTP/1.1\r\nHost: kvtierd\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  bool feed(std::string_view bytes, RequestRecord& r, double now_s) override {
    in_.append(bytes);
    boost::system::error_code ec;
    while (!in_.empty() && !parser_->is_done()) {
      const std::size_t used = parser_->put(boost::asio::buffer(in_), ec);
      in_.erase(0, used);
      if (ec == bhttp::error::need_more) break;
      if (ec) {
        r.error = "malformed HTTP answer: " + ec.message();
        return true;
      }
    }
    if (parser_->is_header_done() && parser_->get().result_int() != 200) {
      if (!parser_->is_done()) return false;
      const json e = json::parse(parser_->get().body(), nullptr, false);
      r.error =
          "HTTP " + std::to_string(parser_->get().result_int()) +
          (e.is_object() && e.contains("error") ? ": " + e["error"].value("message", std::string())
                                                : std::string());
      return true;
    }
    // Server-sent events: "data: {...}" and a blank line each.
    const std::string& body = parser_->get().body();
    for (std::size_t end; (end = body.find("\n\n", seen_)) != std::string::npos; seen_ = end + 2) {
      std::string_view event(body.data() + seen_, end - seen_);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6), r, now_s);
    }
    return parser_->is_done();
  }

 private:
  void on_event(std::string_view data, RequestRecord& r, double now_s) {
    if (data == "[DONE]") return;
    const json e = json::parse(data, nullptr, false);
    if (!e.is_object()) return;
    if (const json* error = member(e, "error")) {
      r.error = "error in the stream: " + error->value("message", std::string());
      return;
    }
    if (const json* usage = member(e, "usage"); usage && usage->is_object()) {
      r.prompt_tokens = usage->value("prompt_tokens", 0);
      r.completion_tokens = usage->value("completion_tokens", 0);
      r.cached = parse_cached(member(*usage, "kvtier_cached_tokens"));
    }
    const json* choices = member(e, "choices");
    if (choices == nullptr || !choices->is_array() || choices->empty()) return;
    const json& c = choices->front();
    const std::string text = c.value("text", std::string());
    if (!text.empty() && r.first_token_s < 0) r.first_token_s = now_s;
    r.text += text;
    if (const json* reason = member(c, "finish_reason"); reason && reason->is_string()) {
      r.finish_reason = reason->get<std::string>();
      if (r.finish_reason == "abort") {
        r.finish_reason = "cancelled";
        r.error = "cancelled by the daemon";
      }
    }
  }

  std::string in_;  // read, not yet parsed
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  std::size_t seen_ = 0;  // bytes of the body's events already taken
};

}  // namespace

std::unique_ptr<Wire> make_wire(const std::string& api) {
  if (api == "jsonrpc") return std::make_unique<JsonRpcWire>();
  if (api == "http") return std::make_unique<HttpWire>();
  return nullptr;
}

}  // namespace kvtier::bench

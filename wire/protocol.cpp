#include "wire/protocol.h"

#include <charconv>
#include <limits>
#include <utility>

#include "wire/access.h"
#include "wire/param_fields.h"

namespace kvtier::wire {

using nlohmann::json;

namespace {

RpcError invalid_params(std::string message) {
  return {rpc_code::kInvalidParams, std::move(message)};
}

std::string dump(const json& j) {
  // replace: a partial UTF-8 character in generated text must not turn a
  // response into an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

// A field parser's result (param_fields.h) as the protocol's error.
template <typename T>
std::expected<T, RpcError> param(std::expected<T, std::string> r) {
  if (!r) return std::unexpected(invalid_params(std::move(r.error())));
  return std::move(*r);
}

// `prompt` (text) or `tokens` (ids) into `prompt`; refuses both.
std::expected<void, RpcError> prompt_get(std::string_view key, const json& v, Prompt& prompt,
                                         bool& have_prompt) {
  if (have_prompt)
    return std::unexpected(
        invalid_params("give one prompt, not two ('" + std::string(key) + "' is the second)"));
  have_prompt = true;
  if (key == "prompt") {
    if (!v.is_string()) return std::unexpected(invalid_params("'prompt' must be a string"));
    prompt = v.get<std::string>();
    return {};
  }
  auto tokens = param(fields::token_ids(v, "tokens"));
  if (!tokens) return std::unexpected(tokens.error());
  prompt = std::move(*tokens);
  return {};
}

// The fields that name a cached prefix, shared by generate and the cache
// methods: `prompt` or `tokens`, and `cache_salt`. False when `key` is none
// of them (the caller goes on); true once it is taken.
std::expected<bool, RpcError> prefix_field_get(std::string_view key, const json& v, Prompt& prompt,
                                               std::string& cache_salt, bool& have_prompt) {
  if (key == "prompt" || key == "tokens") {
    if (auto ok = prompt_get(key, v, prompt, have_prompt); !ok) return std::unexpected(ok.error());
    return true;
  }
  if (key == "cache_salt") {
    auto salt = param(fields::cache_salt(v));
    if (!salt) return std::unexpected(salt.error());
    cache_salt = std::move(*salt);
    return true;
  }
  return false;
}

// Builds a request line's document from the parser's SAX events, as
// json::parse does, but refuses to open a container deeper than
// kMaxJsonDepth: it returns false, which stops the parser there. Nothing here
// recurses: nlohmann's parser keeps its nesting in a vector, and this
// builder keeps a pointer to each open container (at most kMaxJsonDepth of
// them). json::parse's parser callback, which also sees the depth, could
// only discard the deep values and read on, and its discarding scans the
// parent once per member: quadratic on a line of many small objects.
class DepthLimitedBuilder final : public nlohmann::json_sax<json> {
 public:
  // `root` receives the document; on a refusal it holds what was read.
  explicit DepthLimitedBuilder(json& root) : root_(root) {}

  // The parser stopped at a container over kMaxJsonDepth.
  bool too_deep() const { return too_deep_; }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t v, const string_t& /*text*/) override { return value(v); }
  bool string(string_t& v) override { return value(std::move(v)); }
  bool binary(binary_t& /*v*/) override { return false; }  // JSON text has none
  bool start_object(std::size_t /*elements*/) override { return open(json::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t /*elements*/) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const json::exception& /*error*/) override {
    return false;
  }

 private:
  // Puts `v` where the parser is: the root, the next element of the open
  // array, or the open object's member under the last key (a repeated key
  // keeps its last value, as with json::parse).
  json* place(json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& member = parent[key_];
    member = std::move(v);
    return &member;
  }
  bool value(json v) {
    place(std::move(v));
    return true;
  }
  // The pointer stays valid while the container is open: only its own
  // elements are added meanwhile, never its parent's (an array's elements
  // may move when it grows; an object's members never do).
  bool open(json container) {
    if (open_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  std::vector<json*> open_;  // the containers open now, outermost first
  std::string key_;          // the key of the object member whose value comes next
  bool too_deep_ = false;
};

}  // namespace

std::expected<json, JsonParseError> json_parse(std::string_view text) {
  // nlohmann's lexer takes a NUL byte for the end of its input, and so would
  // accept `{...}` followed by a NUL and anything at all. JSON text has no raw
  // NUL (in a string it is written \u0000): text holding one is not JSON.
  if (text.find('\0') != std::string_view::npos)
    return std::unexpected(JsonParseError{false, "parse error: not valid JSON (a NUL byte)"});
  json doc;
  DepthLimitedBuilder builder(doc);
  const bool parsed = json::sax_parse(text, &builder, json::input_format_t::json,
                                      /*strict=*/true, /*ignore_comments=*/false);
  // Before the parse error: the builder stopped the parser at the first
  // container too deep, so the rest of the text was never read.
  if (builder.too_deep()) {
    return std::unexpected(JsonParseError{true, "request nests arrays or objects deeper than " +
                                                    std::to_string(kMaxJsonDepth) + " levels"});
  }
  if (!parsed) return std::unexpected(JsonParseError{false, "parse error: not valid JSON"});
  return doc;
}

std::expected<RpcCall, CallError> call_parse(std::string_view line) {
  auto invalid = [](json id, std::string message) {
    return std::unexpected(
        CallError{std::move(id), {rpc_code::kInvalidRequest, std::move(message)}});
  };
  auto parsed = json_parse(line);
  if (!parsed) {
    const int code = parsed.error().too_deep ? rpc_code::kInvalidRequest : rpc_code::kParseError;
    return std::unexpected(CallError{nullptr, {code, std::move(parsed.error().message)}});
  }
  json doc = std::move(*parsed);
  if (doc.is_array()) return invalid(nullptr, "batch requests are not supported");
  if (!doc.is_object()) return invalid(nullptr, "a request must be a JSON object");

  RpcCall call;
  if (auto it = doc.find("id"); it != doc.end()) {
    if (!it->is_null() && !it->is_string() && !it->is_number_integer()) {
      return invalid(nullptr, "'id' must be a string, an integer or null");
    }
    call.id = *it;
    call.has_id = true;
  }
  auto version = doc.find("jsonrpc");
  if (version == doc.end() || *version != "2.0") {
    return invalid(call.id, "'jsonrpc' must be \"2.0\"");
  }
  auto method = doc.find("method");
  if (method == doc.end() || !method->is_string()) {
    return invalid(call.id, "'method' must be a string");
  }
  call.method = method->get<std::string>();
  if (auto it = doc.find("params"); it != doc.end()) {
    if (!it->is_object() && !it->is_array()) {
      return invalid(call.id, "'params' must be an object or an array");
    }
    call.params = std::move(*it);
  }
  return call;
}

std::expected<GenerateParams, RpcError> generate_params_parse(const json& params) {
  if (!params.is_object()) {
    return std::unexpected(invalid_params("generate takes its parameters by name (an object)"));
  }
  GenerateParams out;
  out.sampling.seed = fields::random_seed();  // unless the request gives one
  bool have_prompt = false;
  for (const auto& [key, v] : params.items()) {
    auto taken = prefix_field_get(key, v, out.prompt, out.cache_salt, have_prompt);
    if (!taken) return std::unexpected(taken.error());
    if (*taken) continue;
    if (key == "messages") {
      if (have_prompt)
        return std::unexpected(
            invalid_params("give one prompt, not two ('messages' is the second)"));
      have_prompt = true;
      auto messages = chat_messages_parse(v);
      if (!messages) return std::unexpected(invalid_params(messages.error()));
      out.messages = std::move(*messages);
    } else if (key == "eviction") {
      if (!v.is_string()) {
        return std::unexpected(
            invalid_params("'eviction' must be a policy string such as "
                           "\"none\" or \"window:256\""));
      }
      auto policy = EvictionPolicy::parse(v.get<std::string>());
      if (!policy) return std::unexpected(invalid_params("'eviction': " + policy.error()));
      out.eviction = *policy;
    } else if (key == "max_tokens") {
      auto n = param(fields::integer(v, key, 1, std::numeric_limits<int>::max()));
      if (!n) return std::unexpected(n.error());
      out.max_tokens = *n;
    } else if (key == "temperature") {
      auto f = param(fields::sampling_float(v, key, /*zero_allowed=*/true,
                                            std::numeric_limits<float>::max(), "0 = greedy"));
      if (!f) return std::unexpected(f.error());
      out.sampling.temperature = *f;
    } else if (key == "top_k") {
      auto n = param(fields::integer(v, key, 0, std::numeric_limits<int>::max()));
      if (!n) return std::unexpected(n.error());
      out.sampling.top_k = *n;
    } else if (key == "top_p") {
      auto f = param(fields::sampling_float(v, key, /*zero_allowed=*/false, 1.0, "1 = no limit"));
      if (!f) return std::unexpected(f.error());
      out.sampling.top_p = *f;
    } else if (key == "seed") {
      auto seed = param(fields::seed(v, key));
      if (!seed) return std::unexpected(seed.error());
      out.sampling.seed = *seed;
    } else if (key == "stop") {
      auto stop = param(fields::strings(v, key));
      if (!stop) return std::unexpected(stop.error());
      out.stop = std::move(*stop);
    } else if (key == "priority") {
      auto n = param(fields::integer(v, key, 0, std::numeric_limits<int>::max()));
      if (!n) return std::unexpected(n.error());
      out.priority = *n;
    } else if (key == "n") {
      auto n = param(fields::integer(v, key, 1, std::numeric_limits<int>::max()));
      if (!n) return std::unexpected(n.error());
      out.n = *n;
    } else if (key == "stream") {
      if (!v.is_boolean()) return std::unexpected(invalid_params("'stream' must be true or false"));
      out.stream = v.get<bool>();
    } else if (key == "ignore_eos") {
      if (!v.is_boolean())
        return std::unexpected(invalid_params("'ignore_eos' must be true or false"));
      out.ignore_eos = v.get<bool>();
    } else if (key == "tool_choice") {
      auto tools = param(fields::tool_choice(v));
      if (!tools) return std::unexpected(tools.error());
      out.tools = *tools;
    } else if (key == "logprobs") {
      auto n = param(fields::integer(v, key, 0, kMaxLogprobs));
      if (!n) return std::unexpected(n.error());
      out.logprobs = *n;
    } else {
      return std::unexpected(invalid_params("unknown parameter '" + key + "'"));
    }
  }
  if (!have_prompt)
    return std::unexpected(
        invalid_params("give 'prompt' (text), 'tokens' (ids) or 'messages' (a conversation)"));
  return out;
}

std::expected<void, RpcError> generate_messages_render(GenerateParams& params,
                                                       const ChatTemplate& chat) {
  if (params.messages.empty()) return {};
  auto rendered = chat.render(params.messages);
  if (!rendered) return std::unexpected(invalid_params("'messages': " + rendered.error()));
  params.prompt = std::move(rendered->prompt);
  chat_stops_add(*rendered, params);
  params.messages.clear();
  return {};
}

std::expected<CachePromptParams, RpcError> cache_prompt_params_parse(const json& params,
                                                                     std::string_view method) {
  const std::string usage = std::string(method) +
                            " takes {\"prompt\": <text>} or {\"tokens\": [<ids>]}, and "
                            "optionally \"cache_salt\"";
  if (!params.is_object()) return std::unexpected(invalid_params(usage));
  CachePromptParams out;
  bool have_prompt = false;
  for (const auto& [key, v] : params.items()) {
    auto taken = prefix_field_get(key, v, out.prompt, out.cache_salt, have_prompt);
    if (!taken) return std::unexpected(taken.error());
    if (!*taken)
      return std::unexpected(invalid_params("unknown parameter '" + key + "' (" + usage + ")"));
  }
  if (!have_prompt) return std::unexpected(invalid_params(usage));
  return out;
}

std::expected<std::vector<Tier>, RpcError> cache_flush_params_parse(const json& params) {
  std::string names;  // every tier's, from the one table
  for (const TierNames& t : kTierNames) names += "\"" + std::string(t.name) + "\" | ";
  const RpcError usage = invalid_params("cache.flush takes {\"tier\": " + names + "\"all\"}");
  if (!params.is_object() || params.size() != 1 || !params.contains("tier") ||
      !params["tier"].is_string()) {
    return std::unexpected(usage);
  }
  const std::string name = params["tier"].get<std::string>();
  // "all" goes top down: L1's blocks are demoted into L2 before L2 is emptied.
  std::vector<Tier> tiers;
  for (int t = 0; t < kNumTiers; ++t)
    if (name == "all" || name == to_string(static_cast<Tier>(t)))
      tiers.push_back(static_cast<Tier>(t));
  if (tiers.empty()) return std::unexpected(usage);
  return tiers;
}

std::expected<std::uint64_t, RpcError> cancel_params_parse(const json& params) {
  if (!params.is_object() || !params.contains("id") || params.size() != 1) {
    return std::unexpected(invalid_params("cancel takes {\"id\": <request id>}"));
  }
  const json& id = params["id"];
  if (id.is_number_unsigned()) return id.get<std::uint64_t>();
  if (id.is_number_integer() && id.get<long long>() >= 0) {
    return static_cast<std::uint64_t>(id.get<long long>());
  }
  return std::unexpected(invalid_params("'id' must be a non-negative integer"));
}

std::expected<void, RpcError> no_params_check(const json& params) {
  if (params.is_object() && params.empty()) return {};
  return std::unexpected(
      invalid_params("this method takes no parameters: leave out 'params' or send {}"));
}

std::string response_line(const json& id, const json& result) {
  return dump(json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
}

std::string error_line(const json& id, const RpcError& error) {
  return dump(json{{"jsonrpc", "2.0"},
                   {"id", id},
                   {"error", {{"code", error.code}, {"message", error.message}}}});
}

std::string line_too_long_line(std::size_t max_line_bytes) {
  return error_line(nullptr, {rpc_code::kLineTooLong, "request line longer than max_line_bytes (" +
                                                          std::to_string(max_line_bytes) + ")"});
}

std::string notification_line(std::string_view method, const json& params) {
  return dump(json{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}});
}

std::expected<json, RpcError> auth_result(const json& params, const std::string& api_key) {
  const auto key = params.is_object() ? params.find("api_key") : params.end();
  if (!params.is_object() || params.size() != 1 || key == params.end() || !key->is_string())
    return std::unexpected(RpcError{rpc_code::kInvalidParams, "auth takes {\"api_key\": string}"});
  if (api_key.empty()) return json{{"authenticated", true}, {"required", false}};
  if (!same_secret(key->get<std::string>(), api_key))
    return std::unexpected(RpcError{rpc_code::kUnauthenticated, "wrong API key"});
  return json{{"authenticated", true}, {"required", true}};
}

RpcError unauthenticated_error() {
  return {rpc_code::kUnauthenticated,
          "authenticate first: call 'auth' with {\"api_key\": KEY} (this TCP listener has an "
          "API key)"};
}

}  // namespace kvtier::wire

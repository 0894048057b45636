#include "daemon/protocol.h"

#include <limits>

namespace kvtier::daemon {

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

std::expected<int, RpcError> int_get(const json& v, std::string_view key, int min, int max) {
  if (!v.is_number_integer()) {
    return std::unexpected(invalid_params("'" + std::string(key) + "' must be an integer"));
  }
  bool in_range;
  long long value = 0;
  if (v.is_number_unsigned()) {
    // JSON's non-negative integers parse as unsigned: the minimum applies
    // here too (the fuzzer found "n": 0 and "max_tokens": 0 let through).
    const auto u = v.get<std::uint64_t>();
    in_range =
        (min <= 0 || u >= static_cast<std::uint64_t>(min)) && u <= static_cast<std::uint64_t>(max);
    value = in_range ? static_cast<long long>(u) : 0;
  } else {
    value = v.get<long long>();
    in_range = value >= min && value <= max;
  }
  if (!in_range) {
    return std::unexpected(invalid_params("'" + std::string(key) + "' must be in [" +
                                          std::to_string(min) + ", " + std::to_string(max) + "]"));
  }
  return static_cast<int>(value);
}

std::expected<float, RpcError> float_get(const json& v, std::string_view key) {
  if (!v.is_number()) {
    return std::unexpected(invalid_params("'" + std::string(key) + "' must be a number"));
  }
  return v.get<float>();
}

// `prompt` (text) or `tokens` (ids) into `prompt`; refuses both.
std::expected<void, RpcError> prompt_get(std::string_view key, const json& v,
                                         std::variant<std::string, std::vector<int>>& prompt,
                                         bool& have_prompt) {
  if (have_prompt) return std::unexpected(invalid_params("give 'prompt' or 'tokens', not both"));
  have_prompt = true;
  if (key == "prompt") {
    if (!v.is_string()) return std::unexpected(invalid_params("'prompt' must be a string"));
    prompt = v.get<std::string>();
    return {};
  }
  if (!v.is_array())
    return std::unexpected(invalid_params("'tokens' must be an array of integers"));
  std::vector<int> tokens;
  tokens.reserve(v.size());
  for (const auto& t : v) {
    auto id = int_get(t, "tokens[]", 0, std::numeric_limits<int>::max());
    if (!id) return std::unexpected(id.error());
    tokens.push_back(*id);
  }
  prompt = std::move(tokens);
  return {};
}

std::expected<std::string, RpcError> salt_get(const json& v) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxCacheSaltBytes) {
    return std::unexpected(invalid_params("'cache_salt' must be a string of at most " +
                                          std::to_string(kMaxCacheSaltBytes) + " bytes"));
  }
  return v.get<std::string>();
}

// The fields that name a cached prefix, shared by generate and the cache
// methods: `prompt` or `tokens`, and `cache_salt`. False when `key` is none
// of them (the caller goes on); true once it is taken.
std::expected<bool, RpcError> prefix_field_get(std::string_view key, const json& v,
                                               std::variant<std::string, std::vector<int>>& prompt,
                                               std::string& cache_salt, bool& have_prompt) {
  if (key == "prompt" || key == "tokens") {
    if (auto ok = prompt_get(key, v, prompt, have_prompt); !ok) return std::unexpected(ok.error());
    return true;
  }
  if (key == "cache_salt") {
    auto salt = salt_get(v);
    if (!salt) return std::unexpected(salt.error());
    cache_salt = std::move(*salt);
    return true;
  }
  return false;
}

}  // namespace

std::expected<RpcCall, CallError> call_parse(std::string_view line) {
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return std::unexpected(
        CallError{nullptr, {rpc_code::kParseError, "parse error: not valid JSON"}});
  }
  auto invalid = [](json id, std::string message) {
    return std::unexpected(
        CallError{std::move(id), {rpc_code::kInvalidRequest, std::move(message)}});
  };
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
    call.params = *it;
  }
  return call;
}

std::expected<GenerateParams, RpcError> generate_params_parse(const json& params) {
  if (!params.is_object()) {
    return std::unexpected(invalid_params("generate takes its parameters by name (an object)"));
  }
  GenerateParams out;
  bool have_prompt = false;
  for (const auto& [key, v] : params.items()) {
    auto taken = prefix_field_get(key, v, out.prompt, out.cache_salt, have_prompt);
    if (!taken) return std::unexpected(taken.error());
    if (*taken) continue;
    if (key == "eviction") {
      if (!v.is_string()) {
        return std::unexpected(
            invalid_params("'eviction' must be a policy string such as "
                           "\"none\" or \"window:256\""));
      }
      auto policy = EvictionPolicy::parse(v.get<std::string>());
      if (!policy) return std::unexpected(invalid_params("'eviction': " + policy.error()));
      out.eviction = *policy;
    } else if (key == "max_tokens") {
      auto n = int_get(v, key, 1, std::numeric_limits<int>::max());
      if (!n) return std::unexpected(n.error());
      out.max_tokens = *n;
    } else if (key == "temperature") {
      auto f = float_get(v, key);
      if (!f) return std::unexpected(f.error());
      out.sampling.temperature = *f;
    } else if (key == "top_k") {
      auto n = int_get(v, key, 0, std::numeric_limits<int>::max());
      if (!n) return std::unexpected(n.error());
      out.sampling.top_k = *n;
    } else if (key == "top_p") {
      auto f = float_get(v, key);
      if (!f) return std::unexpected(f.error());
      out.sampling.top_p = *f;
    } else if (key == "seed") {
      if (v.is_number_unsigned()) {
        out.sampling.seed = v.get<std::uint64_t>();
      } else if (v.is_number_integer() && v.get<long long>() >= 0) {
        out.sampling.seed = static_cast<std::uint64_t>(v.get<long long>());
      } else {
        return std::unexpected(invalid_params("'seed' must be a non-negative integer"));
      }
    } else if (key == "stop") {
      if (!v.is_array())
        return std::unexpected(invalid_params("'stop' must be an array of strings"));
      for (const auto& s : v) {
        if (!s.is_string())
          return std::unexpected(invalid_params("'stop' must be an array of strings"));
        out.stop.push_back(s.get<std::string>());
      }
    } else if (key == "priority") {
      auto n = int_get(v, key, 0, std::numeric_limits<int>::max());
      if (!n) return std::unexpected(n.error());
      out.priority = *n;
    } else if (key == "n") {
      auto n = int_get(v, key, 1, std::numeric_limits<int>::max());
      if (!n) return std::unexpected(n.error());
      out.n = *n;
    } else if (key == "stream") {
      if (!v.is_boolean()) return std::unexpected(invalid_params("'stream' must be true or false"));
      out.stream = v.get<bool>();
    } else {
      return std::unexpected(invalid_params("unknown parameter '" + key + "'"));
    }
  }
  if (!have_prompt)
    return std::unexpected(invalid_params("give 'prompt' (text) or 'tokens' (ids)"));
  return out;
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
  const RpcError usage =
      invalid_params("cache.flush takes {\"tier\": \"l1\" | \"l2\" | \"l3\" | \"all\"}");
  if (!params.is_object() || params.size() != 1 || !params.contains("tier") ||
      !params["tier"].is_string()) {
    return std::unexpected(usage);
  }
  const std::string tier = params["tier"].get<std::string>();
  if (tier == "l1") return std::vector<Tier>{Tier::kL1};
  if (tier == "l2") return std::vector<Tier>{Tier::kL2};
  if (tier == "l3") return std::vector<Tier>{Tier::kL3};
  // Top down: L1's blocks are demoted into L2 before L2 is emptied.
  if (tier == "all") return std::vector<Tier>{Tier::kL1, Tier::kL2, Tier::kL3};
  return std::unexpected(usage);
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
  if (params.empty()) return {};
  return std::unexpected(invalid_params("this method takes no parameters"));
}

std::string response_line(const json& id, const json& result) {
  return dump(json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
}

std::string error_line(const json& id, const RpcError& error) {
  return dump(json{{"jsonrpc", "2.0"},
                   {"id", id},
                   {"error", {{"code", error.code}, {"message", error.message}}}});
}

std::string notification_line(std::string_view method, const json& params) {
  return dump(json{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}});
}

}  // namespace kvtier::daemon

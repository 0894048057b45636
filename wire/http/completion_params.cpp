#include "wire/http/completion_params.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "engine/model/sampler.h"
#include "wire/param_fields.h"

namespace kvtier::wire::http {

namespace {

using nlohmann::json;
constexpr int kIntMax = std::numeric_limits<int>::max();

std::unexpected<ParamError> refuse(const std::string& param, std::string message) {
  return std::unexpected(ParamError{400, std::move(message), param, ""});
}

// A field parser's result (param_fields.h) as ours.
template <typename T>
std::expected<T, ParamError> field(const std::string& key, std::expected<T, std::string> r) {
  if (!r) return refuse(key, std::move(r.error()));
  return std::move(*r);
}

// The fields both endpoints take. False when `key` is none of them (the
// caller goes on); true once it is taken into `spec`.
std::expected<bool, ParamError> common_field(const std::string& key, const json& v,
                                             const std::string& served, GenerationSpec& spec,
                                             bool& stream_options) {
  RequestOptions& p = spec.params;
  if (key == "model") {
    if (!v.is_string()) return refuse(key, "'model' must be a string");
    if (v.get<std::string>() != served)
      return std::unexpected(ParamError{404,
                                        "The model '" + v.get<std::string>() +
                                            "' does not exist; this server serves '" + served + "'",
                                        key, "model_not_found"});
  } else if (key == "temperature") {
    auto f = field(
        key, fields::sampling_float(v, key, true, std::numeric_limits<float>::max(), "0 = greedy"));
    if (!f) return std::unexpected(f.error());
    p.sampling.temperature = *f;
  } else if (key == "top_p") {
    auto f = field(key, fields::sampling_float(v, key, false, 1.0, "1 = no limit"));
    if (!f) return std::unexpected(f.error());
    p.sampling.top_p = *f;
  } else if (key == "top_k") {
    auto k = field(key, fields::integer(v, key, -1, kIntMax));
    if (!k) return std::unexpected(k.error());
    p.sampling.top_k = std::max(*k, 0);  // -1: no limit, as vLLM
  } else if (key == "n") {
    auto n = field(key, fields::integer(v, key, 1, kIntMax));
    if (!n) return std::unexpected(n.error());
    p.n = *n;
  } else if (key == "seed") {
    // Any 64-bit integer, as OpenAI's and vLLM's: a negative one is taken
    // as its two's complement.
    if (v.is_number_unsigned())
      p.sampling.seed = v.get<std::uint64_t>();
    else if (v.is_number_integer())
      p.sampling.seed = static_cast<std::uint64_t>(v.get<std::int64_t>());
    else
      return refuse(key, "'seed' must be an integer");
  } else if (key == "stop") {
    if (v.is_string()) {
      p.stop = {v.get<std::string>()};
    } else {
      auto stop = field(key, fields::strings(v, key));
      if (!stop) return std::unexpected(stop.error());
      p.stop = std::move(*stop);
    }
  } else if (key == "stream") {
    if (!v.is_boolean()) return refuse(key, "'stream' must be true or false");
    spec.stream = v.get<bool>();
  } else if (key == "stream_options") {
    if (!v.is_object()) return refuse(key, "'stream_options' must be an object");
    for (const auto& [k, o] : v.items()) {
      if (k != "include_usage" || !o.is_boolean())
        return refuse(key, "'stream_options' takes {\"include_usage\": true | false}");
      spec.include_usage = o.get<bool>();
    }
    stream_options = true;
  } else if (key == "cache_salt") {
    auto salt = field(key, fields::cache_salt(v));
    if (!salt) return std::unexpected(salt.error());
    p.cache_salt = std::move(*salt);
  } else if (key == "priority") {
    auto n = field(key, fields::integer(v, key, 0, kIntMax));
    if (!n) return std::unexpected(n.error());
    p.priority = *n;
  } else if (key == "ignore_eos") {
    if (!v.is_boolean()) return refuse(key, "'ignore_eos' must be true or false");
    p.ignore_eos = v.get<bool>();
  } else if (key == "user") {
    if (!v.is_string()) return refuse(key, "'user' must be a string");
  } else if (key == "presence_penalty" || key == "frequency_penalty") {
    if (!v.is_number()) return refuse(key, "'" + key + "' must be a number");
    if (v.get<double>() != 0) return refuse(key, "'" + key + "' is not supported (only 0)");
  } else if (key == "logit_bias") {
    if (!v.is_object() || !v.empty()) return refuse(key, "'logit_bias' is not supported (only {})");
  } else {
    return false;
  }
  return true;
}

// What both endpoints start from: a random seed, which a "seed" replaces.
GenerationSpec spec_start(Api api, const std::string& served_model) {
  GenerationSpec spec;
  spec.api = api;
  spec.model = served_model;
  spec.params.sampling.seed = fields::random_seed();
  return spec;
}

// Fields both endpoints check once all are read.
std::expected<void, ParamError> finish(const GenerationSpec& spec, bool stream_options) {
  if (stream_options && !spec.stream)
    return refuse("stream_options", "'stream_options' needs \"stream\": true");
  return {};
}

std::unexpected<ParamError> unknown(const std::string& key) {
  return refuse(key, "Unrecognized request argument supplied: " + key);
}

std::expected<int, ParamError> max_tokens(const std::string& key, const json& v) {
  return field(key, fields::integer(v, key, 1, kIntMax));
}

// "prompt" as one or more prompts.
std::expected<void, ParamError> prompts(const json& v, GenerationSpec& spec) {
  const auto usage = [] {
    return refuse("prompt",
                  "'prompt' must be a string, an array of token ids, an array of strings or an "
                  "array of arrays of token ids, not empty");
  };
  if (v.is_string()) {
    spec.prompts.emplace_back(v.get<std::string>());
    return {};
  }
  if (!v.is_array() || v.empty()) return usage();
  if (v.front().is_number()) {
    auto ids = field("prompt", fields::token_ids(v, "prompt"));
    if (!ids) return std::unexpected(ids.error());
    spec.prompts.emplace_back(std::move(*ids));
    return {};
  }
  for (const json& one : v) {
    if (one.is_string()) {
      spec.prompts.emplace_back(one.get<std::string>());
    } else if (one.is_array() && !one.empty()) {
      auto ids = field("prompt", fields::token_ids(one, "prompt"));
      if (!ids) return std::unexpected(ids.error());
      spec.prompts.emplace_back(std::move(*ids));
    } else {
      return usage();
    }
  }
  return {};
}

}  // namespace

std::expected<GenerationSpec, ParamError> completion_spec(const json& body,
                                                          const std::string& served_model) {
  if (!body.is_object()) return refuse("", "the request body must be a JSON object");
  GenerationSpec spec = spec_start(Api::kCompletions, served_model);
  spec.params.max_tokens = 16;  // OpenAI's default for completions
  bool have_prompt = false, stream_options = false, echo = false;
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    auto taken = common_field(key, v, served_model, spec, stream_options);
    if (!taken) return std::unexpected(taken.error());
    if (*taken) continue;
    if (key == "prompt") {
      if (auto ok = prompts(v, spec); !ok) return std::unexpected(ok.error());
      have_prompt = true;
    } else if (key == "max_tokens") {
      auto n = max_tokens(key, v);
      if (!n) return std::unexpected(n.error());
      spec.params.max_tokens = *n;
    } else if (key == "echo") {
      if (!v.is_boolean()) return refuse(key, "'echo' must be true or false");
      echo = v.get<bool>();
    } else if (key == "logprobs") {
      auto n = field(key, fields::integer(v, key, 0, kMaxLogprobs));
      if (!n) return std::unexpected(n.error());
      spec.params.logprobs = *n;
    } else if (key == "best_of") {
      if (!v.is_number_integer()) return refuse(key, "'best_of' must be an integer");
      if (v.get<long long>() > 1) return refuse(key, "'best_of' above 1 is not supported");
    } else if (key == "suffix") {
      if (!v.is_string() || !v.get<std::string>().empty())
        return refuse(key, "'suffix' is not supported");
    } else {
      return unknown(key);
    }
  }
  if (!have_prompt) return refuse("prompt", "'prompt' is required");
  if (echo && spec.params.logprobs >= 0)
    return refuse("echo",
                  "'echo' with 'logprobs' would need the prompt's logprobs, which this "
                  "server does not compute");
  if (echo) {
    for (const auto& p : spec.prompts) {
      if (!std::holds_alternative<std::string>(p))
        return refuse("echo", "'echo' needs text prompts");
      spec.echo.push_back(std::get<std::string>(p));
    }
  }
  if (auto ok = finish(spec, stream_options); !ok) return std::unexpected(ok.error());
  return spec;
}

std::expected<GenerationSpec, ParamError> chat_spec(const json& body,
                                                    const std::string& served_model,
                                                    const ChatTemplate& chat, int context) {
  if (!body.is_object()) return refuse("", "the request body must be a JSON object");
  GenerationSpec spec = spec_start(Api::kChat, served_model);
  spec.params.max_tokens = context;
  bool have_messages = false, stream_options = false, logprobs = false;
  std::optional<int> top_logprobs;
  std::vector<ChatMessage> conversation;
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    auto taken = common_field(key, v, served_model, spec, stream_options);
    if (!taken) return std::unexpected(taken.error());
    if (*taken) continue;
    if (key == "messages") {
      auto m = chat_messages_parse(v);
      if (!m) return refuse("messages", m.error());
      conversation = std::move(*m);
      have_messages = true;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      auto n = max_tokens(key, v);
      if (!n) return std::unexpected(n.error());
      spec.params.max_tokens = *n;
    } else if (key == "logprobs") {
      if (!v.is_boolean()) return refuse(key, "'logprobs' must be true or false");
      logprobs = v.get<bool>();
    } else if (key == "top_logprobs") {
      auto n = field(key, fields::integer(v, key, 0, kMaxLogprobs));
      if (!n) return std::unexpected(n.error());
      top_logprobs = *n;
    } else if (key == "response_format") {
      if (!v.is_object() || v.value("type", "") != "text" || v.size() != 1)
        return refuse(key, "'response_format' supports {\"type\": \"text\"} only");
    } else if (key == "tools" || key == "functions") {
      if (!v.is_array() || !v.empty()) return refuse(key, "tools are not supported");
    } else if (key == "tool_choice") {
      auto tools = fields::tool_choice(v);
      if (!tools) return refuse(key, tools.error());
      spec.params.tools = *tools;
    } else if (key == "function_call") {
      if (v != "none") return refuse(key, "tools are not supported");
    } else {
      return unknown(key);
    }
  }
  if (!have_messages) return refuse("messages", "'messages' is required");
  if (top_logprobs && !logprobs)
    return refuse("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
  if (logprobs) spec.params.logprobs = top_logprobs.value_or(0);
  auto rendered = chat.render(conversation);
  if (!rendered) return refuse("messages", rendered.error());
  spec.prompts.push_back(std::move(rendered->prompt));
  chat_stops_add(*rendered, spec.params);
  if (auto ok = finish(spec, stream_options); !ok) return std::unexpected(ok.error());
  return spec;
}

}  // namespace kvtier::wire::http

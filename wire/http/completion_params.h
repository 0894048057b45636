// The bodies of POST /v1/completions and POST /v1/chat/completions, checked
// into a GenerationSpec (generation_spec.h). OpenAI's fields and defaults
// (docs/http.md lists them), and ours as extensions:
//
//   top_k       keep the k most likely tokens (0 or -1: no limit), as vLLM;
//   cache_salt  the prefix-cache namespace (a tenant), as on JSON-RPC;
//   priority    0 = most urgent, for the `priority` policy, as vLLM;
//   ignore_eos  generate past the end-of-text token, as vLLM;
//   tool_choice "none" turns off the tool the model calls itself (nanochat's
//               calculator), "auto" leaves it to the `tools` setting.
//
// OpenAI fields a GPT-2 engine cannot honour are accepted at their neutral
// value only (presence_penalty and frequency_penalty 0, an empty
// logit_bias, best_of at most n, no suffix, no client tools) and refused otherwise,
// rather than silently ignored; an unknown field is refused, as OpenAI
// does. A "model" other than the served one is 404 model_not_found; a
// missing one means the served one. null means "not given" for every
// optional field.
//
// Thread-safety: pure functions.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>

#include "wire/chat_template.h"
#include "wire/http/generation_spec.h"

namespace kvtier::wire::http {

struct ParamError {
  int status = 400;
  std::string message;
  std::string param;  // the field at fault, or empty
  std::string code;   // OpenAI's error code ("model_not_found"), or empty
};

// /v1/completions: "prompt" is a string, an array of token ids, an array of
// strings or an array of arrays of token ids (a choice group each).
// max_tokens defaults to 16, as OpenAI's.
std::expected<GenerationSpec, ParamError> completion_spec(const nlohmann::json& body,
                                                          const std::string& served_model);

// /v1/chat/completions: "messages" rendered through `chat` (chat_template.h),
// whose stops (strings, end-of-turn tokens) are added to the request's; a
// conversation the format refuses is a 400 naming the message. max_tokens
// (or max_completion_tokens) defaults to `context`: the answer runs until
// the end of the turn or the model's context ends it.
std::expected<GenerationSpec, ParamError> chat_spec(const nlohmann::json& body,
                                                    const std::string& served_model,
                                                    const ChatTemplate& chat, int context);

}  // namespace kvtier::wire::http

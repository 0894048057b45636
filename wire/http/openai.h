// What the OpenAI endpoints (models, completions, chat completions) of
// kvtierd and the router share: the model's served name, finish reasons in
// OpenAI's words, ids and JSON text. The usage block is kvtierd's
// (daemon/http/usage.h).
#pragma once

#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::wire::http {

// The name clients address the model by ("model" in a request, "id" in
// /v1/models): the model folder's name, "fortunes-char" for the bundled one.
std::string served_model_name(const std::string& model_dir);

// Seconds since the epoch, for "created".
inline std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

// OpenAI's finish reasons: "stop", "length" ("context", the model's context
// full, is "length" there too, as vLLM says), and "abort" for a cancelled
// sample, as vLLM says.
const char* openai_finish_reason(const std::string& ours);

// JSON text with invalid UTF-8 (a BPE token may hold part of a character)
// written as U+FFFD, never an exception.
std::string dump(const nlohmann::json& j);

}  // namespace kvtier::wire::http

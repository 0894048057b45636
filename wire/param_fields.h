// The typed fields of a generation request that JSON-RPC's `generate`
// (protocol.h) and the OpenAI endpoints (http/) both take, each checked one
// way for both: the error is the message for the client, naming the key.
// Value rules that need the model (vocabulary, context, stop strings) are
// the engine's (Scheduler::submit).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::wire::fields {

// The longest `cache_salt` accepted: a tenant or namespace name, not data.
inline constexpr std::size_t kMaxCacheSaltBytes = 256;

// An integer in [min, max].
std::expected<int, std::string> integer(const nlohmann::json& v, std::string_view key, int min,
                                        int max);

// temperature and top_p: a number in [0, max] (zero_allowed) or (0, max],
// judged on the double the client sent and only then narrowed to the
// engine's float; a positive value below the smallest positive float becomes
// that float, not 0. `meaning` explains the range in the message.
std::expected<float, std::string> sampling_float(const nlohmann::json& v, std::string_view key,
                                                 bool zero_allowed, double max,
                                                 std::string_view meaning);

// A non-negative integer up to 2^64 - 1.
std::expected<std::uint64_t, std::string> seed(const nlohmann::json& v, std::string_view key);

// The seed of a request that gives none: drawn from the system's random
// source, so that two sampled runs of one prompt differ (as with OpenAI's,
// vLLM's and llama-server's defaults). The answer reports it, so the run
// can still be replayed with it; it is below 2^53, so that every JSON client
// (JavaScript's numbers are doubles) reads it back exactly.
std::uint64_t random_seed();

// Token ids: an array of non-negative integers.
std::expected<std::vector<int>, std::string> token_ids(const nlohmann::json& v,
                                                       std::string_view key);

// An array of strings.
std::expected<std::vector<std::string>, std::string> strings(const nlohmann::json& v,
                                                             std::string_view key);

// A string of at most kMaxCacheSaltBytes.
std::expected<std::string, std::string> cache_salt(const nlohmann::json& v);

// OpenAI's `tool_choice`, for the tool the model calls itself (nanochat's
// calculator, engine/model/tool_use.h): "none" turns it off for the
// request (false); "auto" leaves it to the server's `tools` setting
// (nullopt). A named function is refused: we run no client's functions.
std::expected<std::optional<bool>, std::string> tool_choice(const nlohmann::json& v);

}  // namespace kvtier::wire::fields

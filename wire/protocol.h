// The kvtierd wire protocol: newline-delimited JSON-RPC 2.0 (docs/protocol.md).
//
// This file parses and validates request lines and builds response,
// error and notification lines. It does no I/O and keeps no state, so it is
// the seam a fuzz target drives and unit tests call directly: every function
// either returns a value or an RpcError carrying the JSON-RPC code and a
// message meant for a human; none throws.
//
// Thread-safety: all functions are pure and may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/cache/tier.h"
#include "engine/scheduling/request_options.h"
#include "wire/chat_template.h"
#include "wire/prompt.h"

namespace kvtier::wire {

// JSON-RPC 2.0 error codes. The -32000..-32099 range is the spec's
// "server error" space; kvtierd's own codes live there.
namespace rpc_code {
inline constexpr int kParseError = -32700;      // the line is not valid JSON
inline constexpr int kInvalidRequest = -32600;  // valid JSON, not a valid request object
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;     // wrong types, out-of-range values
inline constexpr int kInternalError = -32603;     // the engine failed the request
inline constexpr int kTooManyPending = -32000;    // max_pending requests already queued or running
inline constexpr int kLineTooLong = -32001;       // a request line over max_line_bytes
inline constexpr int kShuttingDown = -32002;      // the daemon is stopping
inline constexpr int kPermissionDenied = -32003;  // a privileged method from a uid not allowed it
inline constexpr int kNoPrefixCache = -32004;     // a cache method while the prefix cache is off
inline constexpr int kUnauthenticated = -32005;   // on TCP with an API key, before `auth`
}  // namespace rpc_code

// The deepest nesting of arrays and objects a request line may have; the
// request object itself is level 1, so `params` may hold 63 more. No request
// needs more than 3. The limit exists because nlohmann::json copies, compares
// and writes values recursively: a 600 KB line of 300,000 nested brackets,
// well under max_line_bytes, would otherwise overflow the event loop's stack
// the first time its params were copied.
inline constexpr int kMaxJsonDepth = 64;

struct RpcError {
  int code = rpc_code::kInternalError;
  std::string message;
};

// One parsed request line.
struct RpcCall {
  nlohmann::json id;    // string, integer or null; null also when absent
  bool has_id = false;  // false: a notification, which gets no response
  std::string method;
  nlohmann::json params = nlohmann::json::object();  // object or array; {} when absent
};

// An error while parsing a line, with the id to answer it under (null when
// the id could not be read, as JSON-RPC 2.0 requires).
struct CallError {
  nlohmann::json id;
  RpcError error;
};

// JSON text parsed with the limits below (no raw NUL byte, at most
// kMaxJsonDepth levels, checked as it parses, with no recursion); the HTTP
// API's bodies are read the same way. `too_deep` tells the two refusals
// apart.
struct JsonParseError {
  bool too_deep = false;
  std::string message;
};
std::expected<nlohmann::json, JsonParseError> json_parse(std::string_view text);

// Parses one line (without its '\n'). Refuses, with kParseError, text that is
// not JSON (a raw NUL byte included, where nlohmann::json would stop reading)
// and, with kInvalidRequest, anything but a single request object:
// batches (arrays), a missing or wrong "jsonrpc", a non-string method, an id
// that is not a string, integer or null, params that are not an object or
// array, and (with id null) a line nesting arrays or objects deeper than
// kMaxJsonDepth, wherever the nesting is.
//
// The depth is checked while the line is parsed, before any value of it is
// built deeper than the limit, and with no recursion: parsing needs heap
// memory in proportion to the line, but stack only of a fixed size. So every
// RpcCall it returns is at most kMaxJsonDepth deep, and the recursive
// operations of nlohmann::json (copy, dump, compare) are safe on it.
std::expected<RpcCall, CallError> call_parse(std::string_view line);

// `generate`'s parameters, type-checked: the RequestOptions every front door
// hands the engine (EngineLoop::submit), at their defaults unless given (the
// seed: a random one), plus the prompt and `stream`. Checked here: types,
// ranges that need no model (max_tokens and n at least 1, logprobs 0..20,
// cache_salt at most fields::kMaxCacheSaltBytes), the eviction policy's
// syntax (unset: the daemon's --eviction). Value rules that need the model
// (vocabulary, context, sampling ranges, stop strings, KV budget, n's upper
// bound, the eviction policy against the page size) are the engine's
// (Scheduler::submit) and come back from it as kInvalidParams.
struct GenerateParams : RequestOptions {
  // Exactly one of "prompt" (text to encode), "tokens" (ids) or "messages"
  // (a conversation, as /v1/chat/completions takes it: chat_messages_parse),
  // which generate_messages_render turns into the prompt.
  Prompt prompt;
  std::vector<ChatMessage> messages;
  bool stream = false;
};

// Refuses with kInvalidParams, naming the key: params that are not an
// object, an unknown key, a wrong type, an integer outside int's range,
// none or more than one of prompt, tokens and messages, a temperature that is not in
// [0, FLT_MAX], a top_p that is not in (0, 1]. temperature and top_p are
// judged on the number the client sent, before it is narrowed to a float;
// a positive one below the smallest positive float becomes that float, not 0.
std::expected<GenerateParams, RpcError> generate_params_parse(const nlohmann::json& params);

// Renders `params`' messages, if it has any, through the model's chat format
// into its prompt, and adds the format's stops to the request's. Refuses with
// kInvalidParams what the format refuses (chat_template.h), naming the
// message.
std::expected<void, RpcError> generate_messages_render(GenerateParams& params,
                                                       const ChatTemplate& chat);

// The prompt the cache methods (cache.lookup, cache.warm, cache.pin,
// cache.unpin) act on, and its namespace. Vocabulary and context checks need
// the model and happen on the engine thread.
struct CachePromptParams {
  Prompt prompt;
  std::string cache_salt;
};

// Refuses with kInvalidParams, naming `method` and its parameters: not an
// object, an unknown key, neither or both of prompt and tokens, a bad salt.
std::expected<CachePromptParams, RpcError> cache_prompt_params_parse(const nlohmann::json& params,
                                                                     std::string_view method);

// `cache.flush`'s {"tier": a tier's name (kTierNames) | "all"}: the tiers to flush,
// in the order to flush them.
std::expected<std::vector<Tier>, RpcError> cache_flush_params_parse(const nlohmann::json& params);

// `cancel`'s parameter: {"id": <request id>} (a non-negative integer).
std::expected<std::uint64_t, RpcError> cancel_params_parse(const nlohmann::json& params);

// For the methods that take no parameters. Refuses with kInvalidParams any
// params other than absent or {} (call_parse turns absent into {}); [] too,
// as the protocol's params are always an object.
std::expected<void, RpcError> no_params_check(const nlohmann::json& params);

// Lines to send, each ending in '\n'. Strings that are not valid UTF-8 (a
// byte-level BPE token may hold part of a character) are written with U+FFFD
// in place of the bad bytes rather than failing.
std::string response_line(const nlohmann::json& id, const nlohmann::json& result);
std::string error_line(const nlohmann::json& id, const RpcError& error);
// The answer (id null) to a line the LineFramer dropped as longer than
// `max_line_bytes`: kLineTooLong, naming the limit.
std::string line_too_long_line(std::size_t max_line_bytes);
std::string notification_line(std::string_view method, const nlohmann::json& params);

// `auth` (on TCP with an API key, docs/protocol.md "On TCP"): the answer to
// `params` ({"api_key": string}) when the key is `api_key` (empty: none is
// required, and any key will do), or kInvalidParams or kUnauthenticated.
std::expected<nlohmann::json, RpcError> auth_result(const nlohmann::json& params,
                                                    const std::string& api_key);
// kUnauthenticated, for any call but `auth` and `help` before a
// successful `auth`.
RpcError unauthenticated_error();

}  // namespace kvtier::wire

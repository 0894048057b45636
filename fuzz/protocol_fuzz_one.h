// The one entry point through which the libFuzzer target
// (protocol_fuzz.cpp) and the plain corpus test
// (tests/protocol_fuzz_corpus_test.cpp) drive kvtierd's request parser, so
// CI replays the fuzzer's nasty inputs without clang.
//
// It does to an untrusted line what a session does before anything acts on
// it — split it into lines as the LineFramer does, call_parse each, run every
// parameter parser of protocol.h over its params (generate, cancel,
// no-params) — and checks what must hold whatever the input: nothing throws or crashes,
// errors carry a JSON-RPC code, a line is refused as too deep exactly when it
// nests deeper than kMaxJsonDepth, and every reply line built from parsed data
// is one '\n'-terminated line of valid JSON. A broken property aborts, which
// both libFuzzer and the test report.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "wire/line_framer.h"
#include "wire/protocol.h"

namespace kvtier::wire {

// The framer's limit: kvtierd's default max_line_bytes (DaemonConfig; the
// corpus test checks they agree), so lines as deep as a client may send by
// default reach the parser.
inline constexpr std::size_t kProtocolFuzzMaxLineBytes = std::size_t{1} << 20;

inline void protocol_fuzz_require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "protocol_fuzz: property broken: %s\n", what);
  std::abort();
}

// How deep arrays and objects nest in a JSON text: the most open at once
// (`max`) and those still open at its end (`open`), counting brackets outside
// strings. A loop over the bytes, so it is the oracle for the depth limit
// whatever the depth; exact for valid JSON, and for the valid prefix of
// invalid JSON.
struct JsonTextDepth {
  int max = 0;
  int open = 0;
};

// Calls on_bracket(i) for each '[', '{', ']' or '}' of `text` outside its
// strings, in order.
template <typename OnBracket>
void for_each_bracket(std::string_view text, OnBracket on_bracket) {
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{' || c == ']' || c == '}') {
      on_bracket(i);
    }
  }
}

inline JsonTextDepth json_text_depth(std::string_view text) {
  JsonTextDepth d;
  for_each_bracket(text, [&](std::size_t i) {
    if (text[i] == '[' || text[i] == '{')
      d.max = std::max(d.max, ++d.open);
    else
      --d.open;
  });
  return d;
}

inline void protocol_fuzz_check_line(const std::string& line) {
  protocol_fuzz_require(!line.empty() && line.back() == '\n', "reply ends in a newline");
  protocol_fuzz_require(line.find('\n') == line.size() - 1, "reply is a single line");
  protocol_fuzz_require(!nlohmann::json::parse(line, nullptr, false).is_discarded(),
                        "reply is valid JSON");
}

inline void protocol_fuzz_one_line(std::string_view line) {
  // The oracle, before call_parse: json::accept builds nothing and, like
  // json_text_depth, does not recurse. Like nlohmann's parser, it takes a NUL
  // byte for the end of the input; JSON text holds no raw NUL, and
  // call_parse refuses a line with one (found by this fuzzer: `{...}`, a NUL
  // and a deep tail were accepted).
  const bool valid = line.find('\0') == std::string_view::npos && nlohmann::json::accept(line);
  const bool deeper = json_text_depth(line).max > kMaxJsonDepth;
  auto call = call_parse(line);
  const bool refused_as_deep =
      !call && call.error().error.code == rpc_code::kInvalidRequest &&
      call.error().error.message.find("deeper than " + std::to_string(kMaxJsonDepth)) !=
          std::string::npos;
  // Checked first: a deep document let through would overflow the stack in
  // the checks below, and this says why.
  if (valid) {
    protocol_fuzz_require(refused_as_deep == deeper,
                          "valid JSON is refused as too deep (-32600) exactly when it nests "
                          "deeper than kMaxJsonDepth");
  } else {
    // The parser stops at the first container over the limit, so text that
    // goes wrong only after that is refused as too deep, not as not JSON.
    protocol_fuzz_require(
        !call && (call.error().error.code == rpc_code::kParseError || (refused_as_deep && deeper)),
        "text that is not JSON is refused with -32700, or as too deep when it is");
  }
  if (!call) {
    const int code = call.error().error.code;
    protocol_fuzz_require(code == rpc_code::kParseError || code == rpc_code::kInvalidRequest,
                          "call_parse fails with -32700 or -32600");
    protocol_fuzz_require(!refused_as_deep || call.error().id.is_null(),
                          "a line refused as too deep is answered with id null");
    protocol_fuzz_check_line(error_line(call.error().id, call.error().error));
    return;
  }
  const nlohmann::json& params = call->params;
  protocol_fuzz_require(params.is_object() || params.is_array(), "params is an object or array");
  auto check_error = [&](const RpcError& e) {
    protocol_fuzz_require(e.code == rpc_code::kInvalidParams, "params errors are -32602");
    protocol_fuzz_check_line(error_line(call->id, e));
  };
  if (auto g = generate_params_parse(params); !g) {
    check_error(g.error());
  } else {
    protocol_fuzz_require(g->max_tokens >= 1 && g->n >= 1 && g->priority >= 0,
                          "generate's checked integers are in range");
    // What the engine's SamplingParams::validate wants, always true of what
    // the protocol let through (-1e-300 once passed as -0.0f).
    protocol_fuzz_require(
        !std::signbit(g->sampling.temperature) && std::isfinite(g->sampling.temperature),
        "temperature is finite and not negative");
    protocol_fuzz_require(g->sampling.top_p > 0.0f && g->sampling.top_p <= 1.0f,
                          "top_p is in (0, 1]");
  }
  if (auto c = cancel_params_parse(params); !c) check_error(c.error());
  if (auto n = no_params_check(params); !n) {
    check_error(n.error());
  } else {
    protocol_fuzz_require(params.is_object() && params.empty(), "no params is {}");
  }
  // The reply a handler would build from the parsed request's own data.
  protocol_fuzz_check_line(response_line(call->id, {{"method", call->method}, {"params", params}}));
  protocol_fuzz_check_line(notification_line(call->method, params));
}

// Feeds `data` through a LineFramer at kvtierd's default limit and checks
// every line it yields.
inline void protocol_fuzz_one(const std::uint8_t* data, std::size_t size) {
  LineFramer framer(kProtocolFuzzMaxLineBytes);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const auto& item : framer.feed(bytes)) {
    protocol_fuzz_require(item.too_long || item.line.size() <= kProtocolFuzzMaxLineBytes,
                          "framed lines obey the limit");
    if (!item.too_long) protocol_fuzz_one_line(item.line);
  }
  // A last line without its '\n' is parsed too: the fuzzer's inputs rarely end in one.
  if (bytes.find('\n') == std::string_view::npos && size <= kProtocolFuzzMaxLineBytes) {
    protocol_fuzz_one_line(bytes);
  }
}

}  // namespace kvtier::wire

// The one entry point through which the libFuzzer target
// (protocol_fuzz.cpp) and the plain corpus test
// (tests/protocol_fuzz_corpus_test.cpp) drive kvtierd's request parser, so
// CI replays the fuzzer's nasty inputs without clang.
//
// It does to an untrusted line what a session does before anything acts on
// it — split it into lines as the LineFramer does, call_parse each, run every
// parameter parser of protocol.h over its params (generate, cancel,
// no-params) — and checks what must hold whatever the input: nothing throws or crashes,
// errors carry a JSON-RPC code, and every reply line built from parsed data
// is one '\n'-terminated line of valid JSON. A broken property aborts, which
// both libFuzzer and the test report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/line_framer.h"
#include "daemon/protocol.h"

namespace kvtier::daemon {

inline void protocol_fuzz_require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "protocol_fuzz: property broken: %s\n", what);
  std::abort();
}

inline void protocol_fuzz_check_line(const std::string& line) {
  protocol_fuzz_require(!line.empty() && line.back() == '\n', "reply ends in a newline");
  protocol_fuzz_require(line.find('\n') == line.size() - 1, "reply is a single line");
  protocol_fuzz_require(!nlohmann::json::parse(line, nullptr, false).is_discarded(),
                        "reply is valid JSON");
}

inline void protocol_fuzz_one_line(std::string_view line) {
  auto call = call_parse(line);
  if (!call) {
    const int code = call.error().error.code;
    protocol_fuzz_require(code == rpc_code::kParseError || code == rpc_code::kInvalidRequest,
                          "call_parse fails with -32700 or -32600");
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
  }
  if (auto c = cancel_params_parse(params); !c) check_error(c.error());
  if (auto n = no_params_check(params); !n) check_error(n.error());
  // The reply a handler would build from the parsed request's own data.
  protocol_fuzz_check_line(response_line(call->id, {{"method", call->method}, {"params", params}}));
  protocol_fuzz_check_line(notification_line(call->method, params));
}

// Feeds `data` through a LineFramer (limit 4 KiB, so over-long lines occur)
// and checks every line it yields.
inline void protocol_fuzz_one(const std::uint8_t* data, std::size_t size) {
  LineFramer framer(4096);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const auto& item : framer.feed(bytes)) {
    protocol_fuzz_require(item.too_long || item.line.size() <= 4096, "framed lines obey the limit");
    if (!item.too_long) protocol_fuzz_one_line(item.line);
  }
  // A last line without its '\n' is parsed too: the fuzzer's inputs rarely end in one.
  if (bytes.find('\n') == std::string_view::npos && size <= 4096) protocol_fuzz_one_line(bytes);
}

}  // namespace kvtier::daemon

// How the load generator speaks to kvtierd on one connection: the bytes of
// a request, and what the answer's bytes say about it, for each API the
// daemon serves on its socket:
//
//   jsonrpc  a streamed `generate` (docs/protocol.md): generate.token
//            notifications, then the response with its tokens, cached
//            tokens by tier and the daemon's own timings;
//   http     a streamed POST /v1/completions (docs/http.md): server-sent
//            events parsed with Boost.Beast, the usage chunk's cached
//            tokens by tier; no token ids nor daemon timings (the client's
//            clock times it).
//
// One request is in flight on a connection at a time, so every byte read
// belongs to it.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "bench/loadgen_run.h"

namespace kvtier::bench {

class Wire {
 public:
  virtual ~Wire() = default;
  // The bytes that ask for `r` (its index is r.index).
  virtual std::string request(const RequestRecord& r) = 0;
  // Bytes read from the daemon, at `now_s` (the run's clock). Fills `r` as
  // its answer arrives (first_token_s at the first token); true once the
  // answer is complete (the caller sets done_s).
  virtual bool feed(std::string_view bytes, RequestRecord& r, double now_s) = 0;
};

// nullptr for an API name other than "jsonrpc" and "http".
std::unique_ptr<Wire> make_wire(const std::string& api);

}  // namespace kvtier::bench

// One OpenAI generation request in flight, for /v1/completions and
// /v1/chat/completions alike: its prompts submitted to the engine (one
// engine request per prompt, each with n samples: choice p * n + s), the
// engine's events gathered, and the answer written through the exchange:
// whole, or as server-sent events ending in "data: [DONE]".
//
// A streamed answer starts with the first token, so a request the engine
// refuses (a prompt longer than the context, a token outside the
// vocabulary) still gets its 400 rather than a stream holding an error.
// Each choice's last chunk carries its finish_reason; with
// stream_options.include_usage a chunk with no choices and the usage comes
// before [DONE].
//
// The generations are tracked on the exchange: a client that disconnects
// cancels them. A submit the engine refuses answers 429 (queue full, with
// Retry-After) or 503 (stopping), after cancelling the prompts already
// submitted.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/http/context.h"
#include "wire/http/exchange.h"
#include "wire/http/generation_spec.h"

namespace kvtier::daemon::http {

void run_generation(wire::http::GenerationSpec spec,
                    const std::shared_ptr<wire::http::Exchange>& exchange, Context& context);

}  // namespace kvtier::daemon::http

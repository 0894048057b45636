// A prompt as the front doors take it (JSON-RPC's `generate` and cache
// methods, the HTTP API), and the one way a front door's request becomes
// what Scheduler::submit takes.
//
// Text is encoded on the engine thread, the tokenizer's only user
// (daemon/engine_loop.h), not where the request was parsed: so these run there.
//
// Thread-safety: pure functions over a Tokenizer, which they only read.
#pragma once

#include <expected>
#include <string>
#include <variant>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/scheduling/request_options.h"

namespace kvtier::wire {

// A conversation rendered by a chat format that marks turns with special
// tokens (chat_template.h): pieces of text, each encoded on its own as
// ordinary text, between ids that stand as they are.
struct PromptPieces {
  std::vector<std::variant<std::string, int>> pieces;
};

// Text to encode, token ids, or a rendered conversation.
using Prompt = std::variant<std::string, std::vector<int>, PromptPieces>;

// The prompt's token ids: text encoded, after the token that begins a text
// where the vocabulary has one (nanochat's <|bos|>, as its base prompts
// start: Tokenizer::begin_of_text); ids as given, the caller's to choose;
// pieces encoded one by one, their ids between (the rendering holds its own
// <|bos|>). Refused, with
// "cannot encode the prompt: <why>", for text the tokenizer cannot encode.
// Whether the ids suit the model (empty, outside the vocabulary) is the
// caller's to check.
std::expected<std::vector<int>, std::string> prompt_tokens(const Tokenizer& tokenizer,
                                                           Prompt prompt);

// A front door's request as the scheduler takes it: `options` with the
// prompt's token ids. Refused as prompt_tokens refuses; the rest is
// Scheduler::submit's to validate.
std::expected<RequestParams, std::string> request_params(const Tokenizer& tokenizer, Prompt prompt,
                                                         RequestOptions options);

}  // namespace kvtier::wire

// One OpenAI generation request as its parameters were read
// (completion_params.h): which API, the prompts, the sampling options, and
// how to answer. kvtierd runs it (daemon/http/generation.h); the router
// reads its first prompt to choose a daemon (router/http_front.h).
#pragma once

#include <string>
#include <vector>

#include "engine/scheduling/request_options.h"
#include "wire/prompt.h"

namespace kvtier::wire::http {

enum class Api { kCompletions, kChat };

struct GenerationSpec {
  Api api = Api::kCompletions;
  std::string model;  // the served name, echoed in the answer
  std::vector<Prompt> prompts;
  RequestOptions params;  // n samples per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Completions with echo: each prompt's text, put before its choices' text.
  std::vector<std::string> echo;
};

}  // namespace kvtier::wire::http

// `kvtierd --prompt TEXT`: one generation from the command line, printed to
// stdout, then exit. The whole engine path without the server or the device
// layer, so on the CPU (--device cuda is refused, --threads is honoured);
// scripts/run.sh and the README use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduling/request.h"

namespace kvtier::daemon {

struct OneShotOptions {
  std::string model_dir;
  std::string prompt;
  // A request's defaults, as `generate` and the HTTP API have them.
  int max_tokens = RequestParams{}.max_tokens;
  float temperature = SamplingParams{}.temperature;
  int top_k = SamplingParams{}.top_k;
  float top_p = SamplingParams{}.top_p;
  std::optional<std::uint64_t> seed;  // none: a random one, printed with the summary
  std::vector<std::string> stop;
  int page_size = 16;
  int prefill_chunk = 0;
};

// Returns the process exit code; errors go to stderr.
int oneshot_run(const OneShotOptions& o);

}  // namespace kvtier::daemon

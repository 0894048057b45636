// `kvtierd --prompt TEXT`: one generation from the command line, printed to
// stdout, then exit. The whole engine path without the server; scripts/run.sh
// and the README use it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::daemon {

struct OneShotOptions {
  std::string model_dir;
  std::string prompt;
  int max_tokens = 200;
  float temperature = 0.8f;
  int top_k = 0;
  float top_p = 1.0f;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  int page_size = 16;
  int prefill_chunk = 0;
};

// Returns the process exit code; errors go to stderr.
int oneshot_run(const OneShotOptions& o);

}  // namespace kvtier::daemon

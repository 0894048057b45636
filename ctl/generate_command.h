// `kvtierctl generate`: one `generate` request (docs/protocol.md), its text
// printed (streamed or whole), or its raw JSON.
//
// Only what the user gave is sent, so the daemon's defaults apply to the
// rest (its random seed included: the closing line says which one it drew,
// for --seed to replay the run).
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "ctl/rpc_client.h"

namespace kvtier::ctl {

struct GenerateArgs {
  // The prompt: exactly one of these, or none to read it from stdin.
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;  // "-": stdin
  std::vector<int> tokens;
  // Sampling and scheduling; unset: the daemon's default.
  std::optional<int> max_tokens;
  std::optional<double> temperature;
  std::optional<int> top_k;
  std::optional<double> top_p;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  std::optional<int> priority;
  std::optional<int> samples;
  std::optional<std::string> cache_salt;
  std::optional<std::string> eviction;
  bool stream = false;
  bool json_out = false;
};

// Fills `args.prompt` from --prompt-file, or from stdin when no prompt is
// given and stdin is not a terminal, verbatim (a trailing newline is part
// of the prompt). A one-line reason when there is no prompt to be had.
std::expected<void, std::string> generate_prompt_read(GenerateArgs& args);

// Sends the request and prints its result: the prompt (as text; token ids
// are not echoed) and each sample's continuation on stdout, a summary line
// on stderr; with json_out every notification and the result, one a line.
std::expected<void, CallFailure> run_generate(RpcClient& client, const GenerateArgs& args);

}  // namespace kvtier::ctl

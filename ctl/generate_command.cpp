#include "ctl/generate_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "ctl/status_text.h"

namespace kvtier::ctl {

using nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string slurp(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

json request_params(const GenerateArgs& a) {
  json params = json::object();
  if (a.prompt) {
    params["prompt"] = *a.prompt;
  } else {
    params["tokens"] = a.tokens;
  }
  auto put = [&](const char* key, const auto& value) {
    if (value) params[key] = *value;
  };
  put("max_tokens", a.max_tokens);
  put("temperature", a.temperature);
  put("top_k", a.top_k);
  put("top_p", a.top_p);
  put("seed", a.seed);
  put("priority", a.priority);
  put("n", a.samples);
  put("cache_salt", a.cache_salt);
  put("eviction", a.eviction);
  if (!a.stop.empty()) params["stop"] = a.stop;
  if (a.stream) params["stream"] = true;
  return params;
}

}  // namespace

std::expected<void, std::string> generate_prompt_read(GenerateArgs& args) {
  if (args.prompt || !args.tokens.empty()) return {};
  if (args.prompt_file && *args.prompt_file != "-") {
    std::ifstream in(*args.prompt_file, std::ios::binary);
    if (!in) {
      return std::unexpected("cannot read the prompt file " + *args.prompt_file + ": " +
                             std::strerror(errno));
    }
    args.prompt = slurp(in);
    return {};
  }
  // A terminal would wait for a prompt nobody knows they are to type.
  if (!args.prompt_file && ::isatty(STDIN_FILENO)) {
    return std::unexpected(
        "generate needs a prompt: --prompt TEXT, --prompt-file FILE (- = stdin), --tokens IDS, "
        "or one piped to stdin");
  }
  args.prompt = slurp(std::cin);
  return {};
}

std::expected<void, CallFailure> run_generate(RpcClient& client, const GenerateArgs& a) {
  const std::string shown_prompt = a.prompt.value_or("");
  // Text mode streams sample 0 live; with several samples the others are
  // printed whole at the end, as interleaved text would be unreadable.
  if (a.stream && !a.json_out) std::cout << shown_prompt << std::flush;
  auto result = client.call("generate", request_params(a), [&](const json& n) {
    if (a.json_out) {
      std::cout << dump(n) << std::endl;
    } else if (n.value("method", "") == "generate.token" && n["params"].value("sample", 0) == 0) {
      std::cout << n["params"].value("text", "") << std::flush;
    }
  });
  if (!result) {
    if (a.stream && !a.json_out) std::cout << std::endl;
    return std::unexpected(result.error());
  }
  if (a.json_out) {
    std::cout << dump(*result) << std::endl;
    return {};
  }
  if (!a.stream) std::cout << shown_prompt << result->value("text", "");
  std::cout << std::endl;
  const json samples = result->value("samples", json::array());
  for (std::size_t i = 1; i < samples.size(); ++i) {
    std::cout << "--- sample " << i << " ---\n"
              << shown_prompt << samples[i].value("text", "") << std::endl;
  }
  // The seed the daemon drew when none was given: --seed replays the run.
  const std::string seed =
      result->contains("seed") ? "seed " + (*result)["seed"].dump() + ", " : std::string();
  std::fprintf(stderr, "[%d prompt tokens (cached: %s), %d generated, finish: %s, %s%.1f ms]\n",
               result->value("prompt_tokens", 0), cached_tokens_text(*result).c_str(),
               result->value("completion_tokens", 0),
               result->value("finish_reason", std::string("?")).c_str(), seed.c_str(),
               result->value("timings", json::object()).value("total_ms", 0.0));
  return {};
}

}  // namespace kvtier::ctl

// kvtierd: serves text generation from a GPT-2 family model.
//
// Until the socket server lands this runs one generation from the command
// line (--prompt) and prints it: the whole engine path — config, mapped
// weights, tokenizer, paged KV, sampler — exercised end to end.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

namespace {

struct Options {
  std::string model_dir = KVTIER_DEFAULT_MODEL_DIR;
  std::string prompt;
  int max_tokens = 200;
  float temperature = 0.8f;
  int top_k = 0;
  float top_p = 1.0f;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  int page_size = 16;
  int prefill_chunk = 0;
  int threads = 0;
};

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  auto model = kvtier::Model::load(o.model_dir);
  if (!model) {
    std::fprintf(stderr, "kvtierd: cannot load model from %s: %s\n", o.model_dir.c_str(),
                 model.error().c_str());
    return 1;
  }
  auto tokenizer = kvtier::Tokenizer::load(model->config().tokenizer);
  if (!tokenizer) {
    std::fprintf(stderr, "kvtierd: %s\n", tokenizer.error().c_str());
    return 1;
  }
  auto prompt = (*tokenizer)->encode(o.prompt);
  if (!prompt) {
    std::fprintf(stderr, "kvtierd: cannot encode the prompt: %s\n", prompt.error().c_str());
    return 1;
  }

  const auto layout = model->kv_layout(o.page_size);
  const int blocks = (model->config().block_size + o.page_size - 1) / o.page_size;
  kvtier::tiers::BlockPool pool(layout.block_bytes(), blocks);

  kvtier::GenerateOptions options;
  options.sampling = {o.temperature, o.top_k, o.top_p, o.seed};
  options.max_tokens = o.max_tokens;
  options.stop = o.stop;
  options.page_size = o.page_size;
  options.prefill_chunk = o.prefill_chunk;

  // The prompt is echoed once generation has started, so a refused request
  // prints only its error.
  bool echoed = false;
  auto echo = [&](std::string_view text) {
    if (!echoed) std::cout << o.prompt;
    echoed = true;
    std::cout << text << std::flush;
  };
  auto out = kvtier::generate(*model, pool, tokenizer->get(), *prompt, options, echo);
  if (!out) {
    std::fprintf(stderr, "%skvtierd: %s\n", echoed ? "\n" : "", out.error().c_str());
    return 1;
  }
  echo("");
  std::cout << std::endl;
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated, finish: %s]\n", prompt->size(),
               out->tokens.size(), std::string(kvtier::to_string(out->finish)).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kvtierd: KV-cache tiering inference daemon"};
  app.add_option("--model", o.model_dir, "Model folder (config.json, model.safetensors)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "Generate a continuation of this text and exit")->required();
  app.add_option("--max-tokens", o.max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "Keep the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-p", o.top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of this request's random stream")->capture_default_str();
  app.add_option("--stop", o.stop, "Stop when this text appears (repeatable)");
  app.add_option("--page-size", o.page_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--prefill-chunk", o.prefill_chunk, "Prompt tokens per prefill step; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Compute threads; 0 = OpenMP's default")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  return run(o);
}

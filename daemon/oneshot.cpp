#include "daemon/oneshot.h"

#include <omp.h>

#include <cstdio>
#include <iostream>

#include "engine/model/generator.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "wire/param_fields.h"
#include "wire/prompt.h"

namespace kvtier::daemon {

using wire::prompt_tokens;
namespace fields = wire::fields;

int oneshot_run(const OneShotOptions& o) {
  auto loaded = kvtier::Model::load(o.model_dir);
  if (!loaded) {
    std::fprintf(stderr, "kvtierd: cannot load model from %s: %s\n", o.model_dir.c_str(),
                 loaded.error().c_str());
    return 1;
  }
  kvtier::Model* model = loaded->get();
  auto tokenizer = kvtier::Tokenizer::load(model->config().tokenizer);
  if (!tokenizer) {
    std::fprintf(stderr, "kvtierd: %s\n", tokenizer.error().c_str());
    return 1;
  }
  auto prompt = prompt_tokens(**tokenizer, o.prompt);
  if (!prompt) {
    std::fprintf(stderr, "kvtierd: %s\n", prompt.error().c_str());
    return 1;
  }

  const auto layout = model->kv_layout(o.page_size);
  const int blocks = (model->config().block_size + o.page_size - 1) / o.page_size;
  kvtier::tiers::BlockPool pool(layout.block_bytes(), blocks);

  kvtier::GenerateOptions options;
  const std::uint64_t seed = o.seed.value_or(fields::random_seed());
  options.sampling = {o.temperature, o.top_k, o.top_p, seed};
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
  std::fprintf(
      stderr, "[%zu prompt tokens, %zu generated, finish: %s, seed %llu; cpu, %d threads]\n",
      prompt->size(), out->tokens.size(), std::string(kvtier::to_string(out->finish)).c_str(),
      static_cast<unsigned long long>(seed), omp_get_max_threads());
  return 0;
}

}  // namespace kvtier::daemon

// KV eviction policies (engine/model/eviction_policy.h) against the full cache, in
// the manner of the classic sliding-window benchmarks and OpenVINO GenAI's limit checker:
//   (1) peak KV: the most KV positions (whole pages) a request holds, full
//       cache against windows, sinks + window and H2O;
//   (3) agreement with the full cache: greedy tokens compared position by
//       position (the windowed-attention figure), the first position they differ, and
//       teacher-forced top-1 agreement (the full cache's tokens are fed to
//       both, so one early miss does not count against every later step);
//   gen_length: the longest generation a fixed KV budget allows, with and
//       without eviction (positions stay absolute, so eviction runs until
//       the model's context ends).
// On the bundled character model (models/fortunes-char), the bundled
// nanochat chat model (models/fortunes-chat: rotary positions, windows; its
// prompts rendered as a user turn) and, shorter, on GPT-2 124M shapes with
// random weights (agreement there says how much a random model's attention
// spreads, not how text degrades). Scenarios 2 and 4 (preemptions, batch
// capacity, gen_throughput) need the scheduler and live with it. Prints
// tables; asserts nothing.
//
//   build/bench/eviction_bench [--no-gpt2 | --gpt2-only]
// (the bundled models are found from this source file's path).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/model/gpt2/gpt2_model.h"
#include "engine/model/kv_evictor.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

namespace {

using kvtier::bench::random_tokens;

using kvtier::EvictionPolicy;
using kvtier::Gpt2Model;
using kvtier::KvEvictor;
using kvtier::Model;
using kvtier::SequenceKv;
using kvtier::tiers::BlockPool;

constexpr int kThreads = 2;
constexpr int kPage = 16;

EvictionPolicy policy(const char* text) { return EvictionPolicy::parse(text).value(); }

struct Run {
  std::vector<int> tokens;  // greedy picks (with forcing: the model's own picks)
  int peak_blocks = 0;
  int evicted_blocks = 0;
  int forced_agree = 0;  // steps whose pick equals the forced token
  const char* stop = "max_tokens";
  double seconds = 0.0;
};

// Greedy generation of up to max_tokens under `evict` with KV pages from
// `pool`, applying the policy as the scheduler would: after the forward pass
// that completes the prompt and after each decode step. With `forced`, the
// next input is forced[i] instead of the pick (teacher forcing).
Run greedy(Model& model, BlockPool& pool, const std::vector<int>& prompt,
           const EvictionPolicy& evict, int max_tokens, const std::vector<int>* forced = nullptr) {
  const int V = model.config().vocab_size, context = model.config().block_size;
  SequenceKv kv(kPage);
  KvEvictor evictor(evict, context, static_cast<int>(prompt.size()));
  int previous = -1;  // the token before the input (Model::Chunk::previous_token)
  Run run;
  const auto begin = std::chrono::steady_clock::now();
  std::vector<int> input = prompt;
  while (static_cast<int>(run.tokens.size()) < max_tokens) {
    if (kv.length() + static_cast<int>(input.size()) > context) {
      run.stop = "context";
      break;
    }
    if (!kv.reserve(pool, kv.length() + static_cast<int>(input.size()))) {
      run.stop = "KV budget";
      break;
    }
    run.peak_blocks = std::max(run.peak_blocks, kv.resident_blocks());
    const Model::Chunk chunk{&kv, input, false, evictor.scores(), previous, evictor.scores_from()};
    const auto logits = model.forward(std::span(&chunk, 1), pool).value();
    previous = input.back();
    run.evicted_blocks += evictor.evict(kv, pool);
    const int pick =
        static_cast<int>(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V));
    const std::size_t i = run.tokens.size();
    run.tokens.push_back(pick);
    if (forced != nullptr) {
      if (i >= forced->size()) break;
      run.forced_agree += pick == (*forced)[i] ? 1 : 0;
    }
    input = {forced != nullptr ? (*forced)[i] : pick};
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  kv.release(pool);
  return run;
}

// Positions where a and b agree, over the first n.
int matches(const std::vector<int>& a, const std::vector<int>& b, int n) {
  int same = 0;
  for (int i = 0; i < n && i < static_cast<int>(a.size()) && i < static_cast<int>(b.size()); ++i)
    same += a[i] == b[i] ? 1 : 0;
  return same;
}

int first_difference(const std::vector<int>& a, const std::vector<int>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int>(i);
  return static_cast<int>(n);
}

struct Workload {
  const char* name;
  Model& model;
  std::vector<std::vector<int>> prompts;
  int gen_tokens;
};

int effective(const EvictionPolicy& p, const Workload& w) {
  int most = 0;
  for (const auto& prompt : w.prompts) {
    const int n = static_cast<int>(prompt.size());
    const int positions = std::min(n + w.gen_tokens - 1, w.model.config().block_size);
    most = std::max(most, kvtier::effective_kv_tokens(p, n, positions, kPage));
  }
  return most;
}

// (1) Peak KV per request, full cache against the policies.
void peak_kv(Workload& w, BlockPool& pool, const std::vector<EvictionPolicy>& policies) {
  std::printf("\n== (1) peak KV, %s: %zu requests x %d tokens, page %d\n", w.name, w.prompts.size(),
              w.gen_tokens, kPage);
  std::printf("%-64s %8s %9s %12s %12s %13s %10s\n", "config", "tok/s", "evicted", "avg peak KV",
              "max peak KV", "sum peak KV", "effective");
  double full_sum = 0;
  for (const EvictionPolicy& p : policies) {
    double seconds = 0, sum = 0;
    int most = 0, evicted = 0, tokens = 0;
    for (const auto& prompt : w.prompts) {
      const Run r = greedy(w.model, pool, prompt, p, w.gen_tokens);
      seconds += r.seconds;
      tokens += static_cast<int>(r.tokens.size());
      evicted += r.evicted_blocks;
      sum += r.peak_blocks * kPage;
      most = std::max(most, r.peak_blocks * kPage);
    }
    if (!p.evicts()) full_sum = sum;
    std::printf("%-64s %8.1f %9d %12.1f %12d %13.0f %10d", p.to_string().c_str(), tokens / seconds,
                evicted, sum / w.prompts.size(), most, sum, effective(p, w));
    if (p.evicts() && full_sum > 0) std::printf("  (%.1f%% less)", 100.0 * (1.0 - sum / full_sum));
    std::printf("\n");
  }
}

// (3) Agreement with the full cache.
void agreement(Workload& w, BlockPool& pool, const std::vector<EvictionPolicy>& policies) {
  std::printf("\n== (3) greedy agreement with the full cache, %s: %zu prompts x %d tokens\n",
              w.name, w.prompts.size(), w.gen_tokens);
  std::printf("%-64s %10s %11s %14s %15s %10s\n", "config", "effective", "agreement", "first diff",
              "forced top-1", "peak KV");
  std::vector<std::vector<int>> full;
  for (const auto& prompt : w.prompts)
    full.push_back(greedy(w.model, pool, prompt, EvictionPolicy::none(), w.gen_tokens).tokens);
  for (const EvictionPolicy& p : policies) {
    long same = 0, total = 0, forced = 0, first = 0;
    int peak = 0;
    for (std::size_t i = 0; i < w.prompts.size(); ++i) {
      const Run free_run = greedy(w.model, pool, w.prompts[i], p, w.gen_tokens);
      const Run forced_run = greedy(w.model, pool, w.prompts[i], p, w.gen_tokens, &full[i]);
      same += matches(free_run.tokens, full[i], w.gen_tokens);
      total += static_cast<long>(full[i].size());
      first += first_difference(free_run.tokens, full[i]);
      forced += forced_run.forced_agree;
      peak = std::max(peak, free_run.peak_blocks * kPage);
    }
    std::printf("%-64s %10d %10.1f%% %14.1f %14.1f%% %10d\n", p.to_string().c_str(),
                effective(p, w), 100.0 * same / total,
                static_cast<double>(first) / w.prompts.size(), 100.0 * forced / total, peak);
  }
  std::printf(
      "(agreement: same token at the same position; first diff: mean index of the\n"
      " first different token; forced top-1: the full cache's tokens fed to both)\n");
}

// gen_length: how far one request gets within a fixed KV budget.
void gen_length(Workload& w, int budget_tokens, int cap,
                const std::vector<EvictionPolicy>& policies) {
  const auto& prompt = w.prompts[0];
  std::printf("\n== gen_length, %s: KV budget %d tokens (%d pages), prompt %zu, context %d\n",
              w.name, budget_tokens, budget_tokens / kPage, prompt.size(),
              w.model.config().block_size);
  std::printf("%-64s %10s %12s %12s %10s\n", "config", "effective", "generated", "stopped by",
              "peak KV");
  BlockPool pool(w.model.kv_layout(kPage).block_bytes(), budget_tokens / kPage);
  for (const EvictionPolicy& p : policies) {
    const Run r = greedy(w.model, pool, prompt, p, cap);
    std::printf("%-64s %10d %12zu %12s %10d\n", p.to_string().c_str(),
                kvtier::effective_kv_tokens(p, static_cast<int>(prompt.size()),
                                            w.model.config().block_size, kPage),
                r.tokens.size(), r.stop, r.peak_blocks * kPage);
  }
}

// The policies' tables on one bundled model: peak KV, agreement across
// window sizes, then three budgets, then gen_length.
void bundled_suite(Workload& w, BlockPool& pool) {
  const std::vector<EvictionPolicy> windows = {
      EvictionPolicy::none(),
      policy("window:8"),
      policy("window:16"),
      policy("window:32"),
      policy("window:48"),
      policy("window:64"),
      policy("sinks:16,window:48"),
      policy("h2o:start=16,recent=16,max=64,agg=sum"),
      policy("h2o:start=16,recent=16,max=64,agg=norm_sum"),
  };
  // One budget (effective_kv_tokens 64: four pages) for every policy.
  const std::vector<EvictionPolicy> same_budget = {
      policy("window:48"),
      policy("sinks:16,window:32"),
      policy("h2o:start=16,recent=16,max=48,agg=sum"),
      policy("h2o:start=16,recent=16,max=48,agg=norm_sum"),
      policy("h2o:start=0,recent=16,max=48,agg=norm_sum"),
  };
  const std::vector<EvictionPolicy> same_budget_96 = {
      policy("window:80"),
      policy("sinks:16,window:64"),
      policy("h2o:start=16,recent=32,max=80,agg=sum"),
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum"),
      // SnapKV: the prompt scored by its last 8 / 16 queries.
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,snapkv=8"),
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,snapkv=16"),
      // KVCrush keeps one of the area's two pages for its pattern.
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,kvcrush=1:random"),
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,kvcrush=1:zeros"),
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,kvcrush=1:ones"),
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,kvcrush=1:mean"),
      policy("h2o:start=16,recent=32,max=80,agg=norm_sum,kvcrush=1:alternate"),
  };
  peak_kv(w, pool, windows);
  agreement(w, pool, windows);
  std::printf("-- the same budget (effective KV 64 tokens)\n");
  agreement(w, pool, same_budget);
  std::printf("-- the same budget (effective KV 96 tokens)\n");
  agreement(w, pool, same_budget_96);
  gen_length(w, 96, w.model.config().block_size,
             {EvictionPolicy::none(), policy("window:32"), policy("sinks:16,window:48"),
              policy("h2o:start=16,recent=16,max=64,agg=norm_sum")});
}

// SnapKV acts on a prompt longer than start + recent: the same budget on
// prompts of at least 128 tokens.
void long_prompt_suite(Workload& w, BlockPool& pool) {
  std::printf("-- prompts of 128 tokens or more (SnapKV scores the prompt)\n");
  agreement(w, pool,
            {policy("window:80"), policy("h2o:start=16,recent=32,max=80,agg=norm_sum"),
             policy("h2o:start=16,recent=32,max=80,agg=norm_sum,snapkv=8"),
             policy("h2o:start=16,recent=32,max=80,agg=norm_sum,snapkv=16"),
             policy("h2o:start=16,recent=32,max=80,agg=norm_sum,snapkv=32")});
}

const char* const kPrompts[] = {
    "Q: What is the meaning of life?\nA: ",         "The best way to predict the future is ",
    "Q: Why did the chicken cross the road?\nA: ",  "A man is known by the company he ",
    "It is a truth universally acknowledged that ", "Q: How many programmers does it take?\nA: "};

}  // namespace

int main(int argc, char** argv) {
  const bool gpt2 = !(argc > 1 && std::strcmp(argv[1], "--no-gpt2") == 0);
  const bool bundled = !(argc > 1 && std::strcmp(argv[1], "--gpt2-only") == 0);
  omp_set_num_threads(kThreads);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // tables as they finish: the GPT-2 part is slow
  std::printf("== kvtier KV eviction, %d threads, page %d\n", kThreads, kPage);

  if (bundled) {
    // The bundled character model, then the bundled nanochat chat model,
    // each prompt there a user turn as nanochat renders one.
    for (const char* name : {"fortunes-char", "fortunes-chat"}) {
      const auto dir = kvtier::bench::bundled_model_dir().parent_path() / name;
      auto loaded = Model::load(dir);
      if (!loaded) {
        std::fprintf(stderr, "cannot load %s: %s\n", dir.c_str(), loaded.error().c_str());
        return 1;
      }
      Model& model = **loaded;
      auto tokenizer = kvtier::Tokenizer::load(model.config().tokenizer).value();
      const auto& specials = model.config().tokenizer.special_tokens;
      auto special = [&](const char* text) {
        return kvtier::special_token_id(specials, text).value();
      };
      const bool chat = kvtier::special_token_id(specials, "<|user_start|>").has_value();
      // Prompt i: kPrompts from i on, cycled, until `least` tokens.
      auto render = [&](std::size_t i, int least) {
        std::vector<int> prompt;
        if (chat) prompt = {special("<|bos|>"), special("<|user_start|>")};
        const std::size_t n = std::size(kPrompts);
        for (std::size_t k = 0; k == 0 || static_cast<int>(prompt.size()) < least; ++k) {
          const auto ids = tokenizer->encode(kPrompts[(i + k) % n]).value();
          prompt.insert(prompt.end(), ids.begin(), ids.end());
        }
        if (chat)
          prompt.insert(prompt.end(), {special("<|user_end|>"), special("<|assistant_start|>")});
        return prompt;
      };
      Workload w{name, model, {}, chat ? 160 : 200};
      Workload long_w{name, model, {}, 96};
      for (std::size_t i = 0; i < std::size(kPrompts); ++i) {
        w.prompts.push_back(render(i, 0));
        long_w.prompts.push_back(render(i, 128));
      }
      BlockPool pool(model.kv_layout(kPage).block_bytes(), 64);
      bundled_suite(w, pool);
      long_prompt_suite(long_w, pool);
    }
  }

  if (!gpt2) return 0;
  const auto config = kvtier::ModelConfig::gpt2_124m();
  std::printf("\nbuilding GPT-2 124M-shaped random weights...\n");
  Gpt2Model big(config, kvtier::ModelWeights::random(config, 1));
  BlockPool big_pool(big.kv_layout(kPage).block_bytes(), 24);
  Workload gpt{"GPT-2 124M shapes (random weights)", big, {}, 96};
  gpt.prompts.push_back(random_tokens(32, config.vocab_size, 7));
  peak_kv(gpt, big_pool, {EvictionPolicy::none(), policy("window:32"), policy("window:64")});
  agreement(gpt, big_pool,
            {policy("window:16"), policy("window:48"), policy("sinks:16,window:32"),
             policy("h2o:start=16,recent=16,max=48,agg=norm_sum")});
  gen_length(gpt, 128, 256, {EvictionPolicy::none(), policy("window:64")});
  return 0;
}

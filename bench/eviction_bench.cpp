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
//   build/bench/eviction_bench [--no-gpt2 | --gpt2-only] [--d20]
// (the bundled models are found from this source file's path). --d20 adds
// the policies on nanochat's d20 shape with random weights (5.6 GB written
// to a temp folder and removed after; minutes).
// On a rotary model (nanochat) every H2O row is run again with cache
// rotation (rotate=on) beside it.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_util.h"
#include "bench/random_nanochat.h"
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
  const kvtier::KeyRotation rotation{model.rotary(), model.kv_layout(kPage)};
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
    const Model::Chunk chunk{&kv,
                             input,
                             false,
                             evictor.scores(),
                             previous,
                             evictor.scores_from(),
                             evictor.rotary_offset(kv)};
    const auto logits = model.forward(std::span(&chunk, 1), pool).value();
    previous = input.back();
    run.evicted_blocks += evictor.evict(kv, pool, &rotation);
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
  std::printf("%-72s %8s %9s %12s %12s %13s %10s\n", "config", "tok/s", "evicted", "avg peak KV",
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
    std::printf("%-72s %8.1f %9d %12.1f %12d %13.0f %10d", p.to_string().c_str(), tokens / seconds,
                evicted, sum / w.prompts.size(), most, sum, effective(p, w));
    if (p.evicts() && full_sum > 0) std::printf("  (%.1f%% less)", 100.0 * (1.0 - sum / full_sum));
    std::printf("\n");
  }
}

// (3) Agreement with the full cache.
void agreement(Workload& w, BlockPool& pool, const std::vector<EvictionPolicy>& policies) {
  std::printf("\n== (3) greedy agreement with the full cache, %s: %zu prompts x %d tokens\n",
              w.name, w.prompts.size(), w.gen_tokens);
  std::printf("%-72s %10s %11s %14s %15s %10s %8s\n", "config", "effective", "agreement",
              "first diff", "forced top-1", "peak KV", "tok/s");
  std::vector<std::vector<int>> full;
  for (const auto& prompt : w.prompts)
    full.push_back(greedy(w.model, pool, prompt, EvictionPolicy::none(), w.gen_tokens).tokens);
  for (const EvictionPolicy& p : policies) {
    long same = 0, total = 0, forced = 0, first = 0, generated = 0;
    int peak = 0;
    double seconds = 0;
    for (std::size_t i = 0; i < w.prompts.size(); ++i) {
      const Run free_run = greedy(w.model, pool, w.prompts[i], p, w.gen_tokens);
      const Run forced_run = greedy(w.model, pool, w.prompts[i], p, w.gen_tokens, &full[i]);
      same += matches(free_run.tokens, full[i], w.gen_tokens);
      total += static_cast<long>(full[i].size());
      first += first_difference(free_run.tokens, full[i]);
      forced += forced_run.forced_agree;
      peak = std::max(peak, free_run.peak_blocks * kPage);
      generated += static_cast<long>(free_run.tokens.size());
      seconds += free_run.seconds;
    }
    std::printf("%-72s %10d %10.1f%% %14.1f %14.1f%% %10d %8.1f\n", p.to_string().c_str(),
                effective(p, w), 100.0 * same / total,
                static_cast<double>(first) / w.prompts.size(), 100.0 * forced / total, peak,
                generated / seconds);
  }
  std::printf(
      "(agreement: same token at the same position; first diff: mean index of the\n"
      " first different token; forced top-1: the full cache's tokens fed to both;\n"
      " tok/s: the free runs' tokens over their time, prefill included)\n");
}

// gen_length: how far one request gets within a fixed KV budget.
void gen_length(Workload& w, int budget_tokens, int cap,
                const std::vector<EvictionPolicy>& policies) {
  const auto& prompt = w.prompts[0];
  std::printf("\n== gen_length, %s: KV budget %d tokens (%d pages), prompt %zu, context %d\n",
              w.name, budget_tokens, budget_tokens / kPage, prompt.size(),
              w.model.config().block_size);
  std::printf("%-72s %10s %12s %12s %10s\n", "config", "effective", "generated", "stopped by",
              "peak KV");
  BlockPool pool(w.model.kv_layout(kPage).block_bytes(), budget_tokens / kPage);
  for (const EvictionPolicy& p : policies) {
    const Run r = greedy(w.model, pool, prompt, p, cap);
    std::printf("%-72s %10d %12zu %12s %10d\n", p.to_string().c_str(),
                kvtier::effective_kv_tokens(p, static_cast<int>(prompt.size()),
                                            w.model.config().block_size, kPage),
                r.tokens.size(), r.stop, r.peak_blocks * kPage);
  }
}

// `policies` and, on a model whose positions are rotary, each H2O one again
// with cache rotation, after it.
std::vector<EvictionPolicy> with_rotation(const Workload& w,
                                          const std::vector<EvictionPolicy>& policies) {
  std::vector<EvictionPolicy> out;
  for (const EvictionPolicy& p : policies) {
    out.push_back(p);
    if (w.model.rotary() != nullptr && p.kind == kvtier::EvictionKind::kH2o)
      out.push_back(p.with_rotation(true));
  }
  return out;
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
  agreement(w, pool, with_rotation(w, same_budget));
  std::printf("-- the same budget (effective KV 96 tokens)\n");
  agreement(w, pool, with_rotation(w, same_budget_96));
  gen_length(
      w, 96, w.model.config().block_size,
      with_rotation(w, {EvictionPolicy::none(), policy("window:32"), policy("sinks:16,window:48"),
                        policy("h2o:start=16,recent=16,max=64,agg=norm_sum")}));
}

// The d20 shape with random weights, fed the chat model's prompts as ids
// (the same text; on random weights agreement says how far a change to the
// cache moves a deep, wide model's logits, not how text degrades).
void d20_suite(Workload& w, BlockPool& pool) {
  agreement(
      w, pool,
      with_rotation(w, {EvictionPolicy::none(), policy("window:80"), policy("sinks:16,window:64"),
                        policy("h2o:start=16,recent=32,max=80,agg=sum"),
                        policy("h2o:start=16,recent=32,max=80,agg=norm_sum"),
                        policy("h2o:start=16,recent=32,max=80,agg=norm_sum,snapkv=8"),
                        policy("h2o:start=16,recent=32,max=80,agg=norm_sum,kvcrush=1:ones")}));
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
  bool gpt2 = true, bundled = true, d20 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--no-gpt2")
      gpt2 = false;
    else if (arg == "--gpt2-only")
      bundled = false;
    else if (arg == "--d20")
      d20 = true;
    else {
      std::fprintf(stderr, "usage: %s [--no-gpt2 | --gpt2-only] [--d20]\n", argv[0]);
      return 2;
    }
  }
  d20 = d20 && bundled;  // it takes the chat model's prompts
  std::vector<std::vector<int>> chat_prompts;
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
      if (chat) chat_prompts = w.prompts;
    }
  }

  if (d20 && !chat_prompts.empty()) {
    // 5.6 GB of random weights in a temp folder, removed after.
    const auto dir =
        std::filesystem::temp_directory_path() / ("eviction_bench." + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::printf("\nwriting a d20-shaped random G5 model to %s...\n", dir.c_str());
    auto written =
        kvtier::bench::write_random_nanochat(dir, kvtier::bench::NanochatShape::d20(), 1);
    auto loaded = written ? Model::load(dir) : std::unexpected(written.error());
    if (loaded) {
      Workload w{"d20-shaped, random", **loaded, {chat_prompts[0], chat_prompts[1]}, 112};
      BlockPool pool((*loaded)->kv_layout(kPage).block_bytes(), 24);
      d20_suite(w, pool);
    }
    std::filesystem::remove_all(dir);
    if (!loaded) {
      std::fprintf(stderr, "d20: %s\n", loaded.error().c_str());
      return 1;
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

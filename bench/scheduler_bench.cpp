// The scheduler under a fixed KV budget, the tight-budget and batch-capacity scenarios
// and OpenVINO GenAI's gen_throughput, on the bundled model and on GPT-2 124M
// shapes (random weights):
//   (2) a tight budget: preemptions, tokens computed twice (wasted) and
//       tokens/s, with recompute preemption, with swap (prefix cache + L2),
//       and with a sliding window that keeps the requests small;
//   (4) batch capacity: how many requests ran at once and tokens/s, with and
//       without eviction, and gen_throughput (OpenVINO GenAI's limit check): how
//       many sequences fit the budget at their largest (effective) size, so
//       run side by side without ever being preempted.
// Prints tables; asserts nothing. Eviction figures differ from full-cache
// ones by design (see bench/eviction_bench for agreement).
//
//   build/bench/scheduler_bench [--no-gpt2]
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
#include "engine/scheduling/scheduler.h"

namespace {

using kvtier::bench::random_tokens;

using namespace kvtier;
using Clock = std::chrono::steady_clock;

constexpr int kThreads = 2;

struct Outcome {
  double seconds = 0;
  long generated = 0;
  long preemptions = 0;
  long recomputed = 0;
  int peak_running = 0;
  int peak_blocks = 0;
};

Outcome run(Model& model, const SchedulerConfig& config, const std::vector<RequestParams>& reqs) {
  auto made = Scheduler::create(model, nullptr, config);
  if (!made) {
    std::printf("  cannot build the scheduler: %s\n", made.error().c_str());
    return {};
  }
  Scheduler& s = **made;
  Outcome o;
  std::vector<RequestId> ids;
  const auto start = Clock::now();
  for (const RequestParams& p : reqs) {
    auto id = s.submit(p);
    if (!id) {
      std::printf("  refused: %s\n", id.error().c_str());
      return {};
    }
    ids.push_back(*id);
  }
  while (s.has_work()) {
    s.step();
    const SchedulerStats st = s.stats();
    o.peak_running = std::max(o.peak_running, st.running + st.prefilling);
    o.peak_blocks = std::max(o.peak_blocks, st.blocks_used);
  }
  o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (RequestId id : ids) o.generated += s.find(id)->num_generated();
  o.preemptions = s.stats().preemptions;
  o.recomputed = s.stats().recomputed_tokens;
  return o;
}

std::vector<RequestParams> workload(int count, int prompt, int max_tokens, int vocab,
                                    const EvictionPolicy& policy) {
  std::vector<RequestParams> reqs;
  for (int i = 0; i < count; ++i) {
    RequestParams p;
    p.prompt = random_tokens(prompt, vocab, 1000 + static_cast<unsigned>(i));
    p.max_tokens = max_tokens;
    p.sampling = {0.0f, 0, 1.0f, 0};
    p.eviction = policy;
    reqs.push_back(std::move(p));
  }
  return reqs;
}

void header(const char* first) {
  std::printf("  %-22s %10s %11s %11s %8s %8s %9s\n", first, "preempted", "recomputed",
              "peak batch", "peak KV", "seconds", "tok/s");
}

void row(const std::string& name, const Outcome& o, int page) {
  std::printf("  %-22s %10ld %11ld %11d %8d %8.2f %9.1f\n", name.c_str(), o.preemptions,
              o.recomputed, o.peak_running, o.peak_blocks * page, o.seconds,
              o.seconds > 0 ? o.generated / o.seconds : 0.0);
}

struct Scenario {
  const char* model_name;
  Model& model;
  int count, prompt, max_tokens;
  int tight_budget;  // tokens, for (2)
  int fixed_budget;  // tokens, for (4)
  int max_batch;
  EvictionPolicy window;
  EvictionPolicy h2o;
};

void scenarios(const Scenario& sc) {
  const int V = sc.model.config().vocab_size;
  const int page = 16;
  const std::size_t block_bytes = sc.model.kv_layout(page).block_bytes();
  std::printf("\n== %s: %d requests x (%d prompt + %d generated), page %d, %d threads\n",
              sc.model_name, sc.count, sc.prompt, sc.max_tokens, page, kThreads);

  std::printf("(2) tight budget: max_kv_tokens %d, batch %d\n", sc.tight_budget, sc.max_batch);
  header("preemption / policy");
  const auto full = workload(sc.count, sc.prompt, sc.max_tokens, V, EvictionPolicy::none());
  SchedulerConfig c;
  c.page_size = page;
  c.max_kv_tokens = sc.tight_budget;
  c.max_batch_size = sc.max_batch;
  c.token_budget = std::max(64, sc.max_batch);
  row("recompute", run(sc.model, c, full), page);
  SchedulerConfig swap = c;
  swap.prefix_cache = true;
  swap.preemption = PreemptionMode::kSwap;
  swap.cache.l2_bytes = static_cast<std::size_t>(4 * sc.tight_budget / page) * block_bytes;
  row("swap (L2)", run(sc.model, swap, full), page);
  row("recompute, " + sc.window.to_string(),
      run(sc.model, c, workload(sc.count, sc.prompt, sc.max_tokens, V, sc.window)), page);

  std::printf("(4) batch capacity and gen_throughput: max_kv_tokens %d, batch up to %d\n",
              sc.fixed_budget, sc.count);
  header("policy");
  SchedulerConfig cap = c;
  cap.max_kv_tokens = sc.fixed_budget;
  cap.max_batch_size = sc.count;
  cap.token_budget = std::max(64, sc.count);
  for (const EvictionPolicy& p : {EvictionPolicy::none(), sc.window, sc.h2o}) {
    const int effective = effective_kv_tokens(p, sc.prompt, sc.prompt + sc.max_tokens - 1, page);
    const Outcome o = run(sc.model, cap, workload(sc.count, sc.prompt, sc.max_tokens, V, p));
    row(p.to_string(), o, page);
    std::printf(
        "  %-22s gen_throughput: at most %d KV tokens each, so %d fit the budget at "
        "their largest\n",
        "", effective, sc.fixed_budget / effective);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpt2 = !(argc > 1 && std::strcmp(argv[1], "--no-gpt2") == 0);
  omp_set_num_threads(kThreads);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  const auto dir = kvtier::bench::bundled_model_dir();
  auto loaded = Gpt2Model::load(dir);
  if (!loaded) {
    std::fprintf(stderr, "cannot load %s: %s\n", dir.c_str(), loaded.error().c_str());
    return 1;
  }
  scenarios({"fortunes-char", *loaded, 16, 40, 160, 640, 640, 8, EvictionPolicy::sliding_window(32),
             EvictionPolicy::h2o(16, 16, 64)});
  if (!gpt2) return 0;
  const auto config = ModelConfig::gpt2_124m();
  std::printf("\nbuilding GPT-2 124M-shaped random weights...\n");
  Gpt2Model big(config, ModelWeights::random(config, 1));
  scenarios({"GPT-2 124M shapes (random weights)", big, 8, 32, 64, 288, 512, 4,
             EvictionPolicy::sliding_window(32), EvictionPolicy::h2o(16, 16, 64)});
  return 0;
}

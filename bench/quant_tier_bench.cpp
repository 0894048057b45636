// What an int8 L2 (l2_format = int8) costs and buys, on the shipped model:
//   * bytes per block, exact against int8, and blocks per MiB of L2;
//   * greedy agreement with exact: prompts sharing a long prefix, generated
//     with the prefix served from L2 (L1 flushed before each), once with an
//     exact L2 and once with an int8 one; the fraction of generated
//     positions whose token is the same, and the mean first position that
//     differs (the generation length when none does);
//   * the L2 promotion time per block (KvCache::calibrate: a copy for exact,
//     a decode for int8), for the shipped model's blocks and GPT-2 124M's.
// Prints figures; asserts nothing.
//
//   build/bench/quant_tier_bench
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/model/gpt2/gpt2_model.h"
#include "engine/scheduling/scheduler.h"
#include "kernels/kv_quant.h"

namespace {

using namespace kvtier;

constexpr int kThreads = 2;
constexpr int kGenerate = 56;
constexpr std::size_t kL2Bytes = std::size_t{64} << 20;

// 148 characters (9 full blocks) every prompt starts with, then its own
// tail; prompt + generation stays inside the model's 256 positions.
const std::string kPrefix =
    "Q: What is the difference between a duck? A: One of its legs is both the same. "
    "You will be fortunate in everything you put your hands to. Love is a ";
const std::vector<std::string> kTails = {
    "duck.",    "cat.",  "lion?",   "friend", "Q: Why", "A: One", "The end", "hands.",
    "fortune.", "legs.", "Q: What", "same",   "bird",   "truth",  "sea",     "night"};

struct Pass {
  std::vector<std::vector<int>> tokens;  // per prompt
  std::size_t block_bytes = 0;
  std::size_t l2_capacity = 0;
  long l2_hits = 0;
  double promote_s = 0;  // calibrated L2 promotion per block
};

Pass run_pass(Model& model, const Tokenizer* tokenizer, KvFormat format) {
  SchedulerConfig c;
  c.prefix_cache = true;
  c.max_kv_tokens = 4096;
  c.max_batch_size = 1;
  c.token_budget = 256;
  c.cache.l2_bytes = kL2Bytes;
  c.cache.l2_format = format;
  auto made = Scheduler::create(model, tokenizer, c);
  if (!made) {
    std::printf("cannot build the scheduler: %s\n", made.error().c_str());
    std::exit(1);
  }
  Scheduler& s = **made;
  s.calibrate_tier_costs();
  Pass pass;
  pass.promote_s = s.cache()->stats().costs.load[Tier::kL2].per_block_s;
  // Warm: the prefix's blocks enter the cache (computed, exact, in L1).
  RequestParams warm;
  warm.prompt = tokenizer->encode(kPrefix + "!").value();
  warm.max_tokens = 1;
  (void)s.submit(warm);
  while (s.has_work()) s.step();
  for (const std::string& tail : kTails) {
    s.cache()->flush(Tier::kL1);  // everything cached goes down to L2
    RequestParams p;
    p.prompt = tokenizer->encode(kPrefix + tail).value();
    p.max_tokens = kGenerate;
    p.sampling = {0.0f, 0, 1.0f, 0};
    const RequestId id = *s.submit(p);
    while (s.has_work()) s.step();
    const Request* r = s.find(id);
    pass.tokens.emplace_back(r->generated().begin(), r->generated().end());
  }
  const CacheStats st = s.cache()->stats();
  pass.block_bytes = st.tier[1].block_bytes;
  pass.l2_capacity = st.tier[1].capacity_blocks;
  pass.l2_hits = st.tier[1].hits;
  return pass;
}

// The calibrated L2 promotion of one block of `layout` (fresh pools).
double promotion_s(const KvLayout& layout, KvFormat format) {
  const std::size_t bytes = (layout.block_bytes() + 4095) / 4096 * 4096;
  tiers::BlockPool l1(bytes, 8, tiers::Memory::kPageAligned);
  CacheConfig c;
  c.l2_bytes = 4 * bytes;
  c.l2_format = format;
  auto cache = KvCache::create(layout, 1, l1, c);
  return cache ? (*cache)->calibrate().load[Tier::kL2].per_block_s : 0;
}

}  // namespace

int main() {
  omp_set_num_threads(kThreads);
  auto model = Gpt2Model::load(bench::bundled_model_dir());
  if (!model) {
    std::printf("cannot load the bundled model: %s\n", model.error().c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::load(model->config().tokenizer);
  if (!tokenizer) {
    std::printf("cannot load its tokenizer: %s\n", tokenizer.error().c_str());
    return 1;
  }
  const Pass exact = run_pass(*model, tokenizer->get(), KvFormat::kExact);
  const Pass int8 = run_pass(*model, tokenizer->get(), KvFormat::kInt8);

  std::printf("\n== int8 L2 on the shipped model (%s), %d threads\n",
              bench::bundled_model_dir().filename().c_str(), kThreads);
  const double mib = static_cast<double>(kL2Bytes) / (1 << 20);
  std::printf("bytes per block:    exact %zu, int8 %zu (%.2fx smaller)\n", exact.block_bytes,
              int8.block_bytes, static_cast<double>(exact.block_bytes) / int8.block_bytes);
  std::printf("blocks per MiB L2:  exact %.1f, int8 %.1f (%.2fx; slots are page-rounded)\n",
              exact.l2_capacity / mib, int8.l2_capacity / mib,
              static_cast<double>(int8.l2_capacity) / exact.l2_capacity);

  long same = 0, total = 0, identical = 0;
  double first_diff_sum = 0;
  for (std::size_t i = 0; i < exact.tokens.size(); ++i) {
    const std::vector<int>& a = exact.tokens[i];
    const std::vector<int>& b = int8.tokens[i];
    const std::size_t n = std::min(a.size(), b.size());
    std::size_t first = n;
    for (std::size_t k = 0; k < n; ++k) {
      same += a[k] == b[k];
      if (a[k] != b[k] && first == n) first = k;
    }
    total += static_cast<long>(std::max(a.size(), b.size()));
    identical += a == b;
    first_diff_sum += static_cast<double>(first);
  }
  std::printf(
      "greedy agreement:   %zu prompts sharing %zu characters, %d tokens each, prefix from L2 "
      "(L2 hits: exact %ld, int8 %ld)\n",
      kTails.size(), kPrefix.size(), kGenerate, exact.l2_hits, int8.l2_hits);
  std::printf(
      "                    %.3f of positions equal; %ld of %zu sequences identical; mean first "
      "differing position %.1f (of %d)\n",
      total > 0 ? static_cast<double>(same) / total : 0.0, identical, exact.tokens.size(),
      first_diff_sum / static_cast<double>(exact.tokens.size()), kGenerate);

  const KvLayout shipped = model->kv_layout(16);
  const KvLayout gpt2{12, 12, 64, 16, {}};
  std::printf("L2 promotion/block: shipped (%zu bytes): copy %.1f us, decode %.1f us\n",
              shipped.block_bytes(), promotion_s(shipped, KvFormat::kExact) * 1e6,
              promotion_s(shipped, KvFormat::kInt8) * 1e6);
  std::printf("                    GPT-2 124M (%zu bytes): copy %.1f us, decode %.1f us\n",
              gpt2.block_bytes(), promotion_s(gpt2, KvFormat::kExact) * 1e6,
              promotion_s(gpt2, KvFormat::kInt8) * 1e6);
  std::printf("                    (in the scheduler runs: exact %.1f us, int8 %.1f us)\n",
              exact.promote_s * 1e6, int8.promote_s * 1e6);
  return 0;
}

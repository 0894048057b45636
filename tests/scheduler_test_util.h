// The scheduler tests' shared pieces, on the bundled model: requests, a
// scheduler, the request run alone with generate() (the reference a
// scheduled run must equal), and driving a Scheduler to the end with the
// invariants checked after every step.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/cache/block_hash.h"
#include "engine/model/generator.h"
#include "engine/scheduling/scheduler.h"
#include "test_util.h"

namespace kvtier::test_util {

inline SamplingParams greedy() { return {0.0f, 0, 1.0f, 0}; }
inline SamplingParams sampled(std::uint64_t seed) { return {0.9f, 40, 0.95f, seed}; }

// A request for `prompt`, in the bundled model's tokens; a suite sets the
// other fields it varies (priority, stop strings, salt, eviction).
inline RequestParams request_params(std::string_view prompt, int max_tokens,
                                    SamplingParams sampling = greedy()) {
  RequestParams p;
  auto ids = bundled_model().tokenizer->encode(prompt);
  EXPECT_TRUE(ids.has_value()) << ids.error();
  p.prompt = ids.value_or(std::vector<int>{});
  p.max_tokens = max_tokens;
  p.sampling = sampling;
  return p;
}

// A scheduler over the bundled model; nullptr (and the test failed) when
// `config` is refused.
inline std::unique_ptr<Scheduler> make_scheduler(const SchedulerConfig& config) {
  auto s = Scheduler::create(bundled_model().model, bundled_model().tokenizer.get(), config);
  EXPECT_TRUE(s.has_value()) << s.error();
  return s ? std::move(*s) : nullptr;
}

// The request run alone through the single-request loop, generate(), with
// its sampling, length, stop strings and eviction policy, in pages of
// `page_size` from a pool of `pool_blocks`.
inline Generation alone(const RequestParams& p, int page_size = 16, int pool_blocks = 17) {
  Model& model = bundled_model().model;
  tiers::BlockPool pool(model.kv_layout(page_size).block_bytes(), pool_blocks);
  GenerateOptions o;
  o.sampling = p.sampling;
  o.max_tokens = p.max_tokens;
  o.stop = p.stop;
  o.page_size = page_size;
  if (p.eviction) o.eviction = *p.eviction;
  auto g = generate(model, pool, bundled_model().tokenizer.get(), p.prompt, o);
  EXPECT_TRUE(g.has_value()) << g.error();
  return g.value_or(Generation{});
}

// Submits every request, then steps until the scheduler has no work. Fails
// on a refused submission, a request error, a broken check_invariants()
// after any step, or no end after max_steps. ids gets the requests' ids in
// submission order.
inline ::testing::AssertionResult submit_and_run(Scheduler& s,
                                                 const std::vector<RequestParams>& reqs,
                                                 std::vector<RequestId>& ids,
                                                 int max_steps = 50000) {
  ids.clear();
  for (const RequestParams& p : reqs) {
    auto id = s.submit(p);
    if (!id) return ::testing::AssertionFailure() << "submit: " << id.error();
    ids.push_back(*id);
  }
  for (int step = 0; s.has_work(); ++step) {
    if (step == max_steps)
      return ::testing::AssertionFailure() << "no end after " << max_steps << " steps";
    for (const RequestEvent& e : s.step().events)
      if (!e.error.empty()) return ::testing::AssertionFailure() << e.error;
    if (auto ok = s.check_invariants(); !ok)
      return ::testing::AssertionFailure() << "step " << step << ": " << ok.error();
  }
  return ::testing::AssertionSuccess();
}

// The bytes of block `b` of `prompt` (16-token pages, the default salt) in
// the L1 `pool` of scheduler `s`, found by its key; empty when the block is
// not usable in L1.
inline std::span<const std::byte> l1_block_bytes(Scheduler& s, tiers::BlockPool& pool,
                                                 std::size_t block_bytes,
                                                 std::span<const int> prompt, int b) {
  tiers::BlockKey key = s.cache()->root("");
  for (int i = 0; i <= b; ++i)
    key = chain_key(key, prompt.subspan(static_cast<std::size_t>(i) * 16, 16));
  const CacheNode* node = s.cache()->tree().find(key);
  if (node == nullptr || !node->usable_l1()) return {};
  return {pool.data(node->slot(Tier::kL1)), block_bytes};
}

}  // namespace kvtier::test_util

// Time to first token through a Scheduler, for the benches that compare
// where a prompt's prefix comes from (tier_bench, remote_bench).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduling/scheduler.h"

namespace kvtier::bench {

// A greedy request; a cache_salt of its own makes it cold.
inline RequestParams ttft_request(std::vector<int> prompt, int max_tokens, std::string salt = "") {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling = {0.0f, 0, 1.0f, 0};
  p.cache_salt = std::move(salt);
  return p;
}

// The scheduler both benches time through, before its tiers: a prefix
// cache of `page`-token blocks, room for the 1024-token prompt and a whole
// prompt in one chunk, as a cold TTFT would be.
inline SchedulerConfig ttft_scheduler_config(int page) {
  SchedulerConfig c;
  c.prefix_cache = true;
  c.page_size = page;
  c.max_kv_tokens = 2048;
  c.max_batch_size = 8;
  c.token_budget = 1024;
  c.cache.write_policy = WritePolicy::kWriteThrough;
  return c;
}

inline void run_all(Scheduler& s) {
  while (s.has_work()) s.step();
}

// Submits and steps until the request's first token: (seconds, that token),
// then runs what is left; (0, -1) if it failed.
inline std::pair<double, int> time_to_first_token(Scheduler& s, RequestParams p) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const RequestId id = *s.submit(std::move(p));
  while (true) {
    for (const RequestEvent& e : s.step().events) {
      if (e.id == id && !e.tokens.empty()) {
        const double took = std::chrono::duration<double>(Clock::now() - start).count();
        run_all(s);
        return {took, e.tokens.front()};
      }
      if (e.id == id && !e.error.empty()) {
        std::printf("request failed: %s\n", e.error.c_str());
        return {0, -1};
      }
    }
  }
}

}  // namespace kvtier::bench

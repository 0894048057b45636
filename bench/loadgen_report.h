// What a load run measured, as a table and as CSV files (docs/bench.md
// lists the columns). The table's TTFTs are from arrival (client clock);
// hit rates are shares of prompt tokens served from each tier, from the
// requests' cached_tokens, and shares of looked-up blocks from the daemon's
// `stats` when it reports a `cache` object.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/loadgen_run.h"
#include "bench/loadgen_stats.h"

namespace kvtier::bench {

struct Distribution {
  long count = 0;
  double mean = 0, p50 = 0, p99 = 0, max = 0;
};
Distribution distribution(std::vector<double> values);

struct Summary {
  long arrived = 0, ok = 0, failed = 0, lost = 0;
  double elapsed_s = 0;
  double requests_per_s = 0, tokens_per_s = 0;  // completed requests / generated tokens
  Distribution ttft, queue, decode_tok_s;
  // By the deepest tier that served the prompt (RequestRecord::hit_tier).
  Distribution ttft_by_hit[kNumTiers + 1];
  long prompt_tokens = 0;
  PerTier<long> cached_tokens;
  PerTier<double> token_hit_rate;  // cached_tokens[t] / prompt_tokens
  long prefilled_tokens() const;   // prompt tokens no tier had
  bool has_cache_stats = false;
  StatsView daemon;  // the run's own share of the daemon's counters
  long peak_rss_kb = -1;
  std::string first_error;
};

Summary summarize(const LoadResult& result);

void print_summary(const Summary& s, std::FILE* out);

// Columns side by side, one per (label, summary).
void print_comparison(const std::vector<std::pair<std::string, Summary>>& runs, std::FILE* out);

// One row per request / per stats sample. False (and a message on stderr)
// when the file cannot be written.
bool write_requests_csv(const std::string& path, const LoadResult& result);
bool write_stats_csv(const std::string& path, const LoadResult& result);

// The run's settings for scripts/plot_soak.sh's titles, one `key,value` a
// line under a `key,value` header: `extra` first (what only the caller
// knows: label, model, preemption, remote), then the load's (workload, api,
// rate, concurrency, daemons, duration_s, seed) and the size in blocks of
// each tier the daemon's stats gave one (l1_blocks, l2_blocks, l3_blocks).
using Settings = std::vector<std::pair<std::string, std::string>>;
bool write_config_csv(const std::string& path, const LoadOptions& options, const LoadResult& result,
                      const Settings& extra);

}  // namespace kvtier::bench

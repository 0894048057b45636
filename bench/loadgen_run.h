// The load generator's engine: open-loop Poisson arrivals from a Workload,
// sent over `concurrency` Asio connections to each kvtierd socket, each
// connection carrying one streamed `generate` at a time (so every
// generate.token notification on it belongs to that request and the client
// can time the first token). With several daemons (a fleet), arrivals go to
// them round-robin, as a load balancer would spread them. Arrivals that
// find every connection to their daemon busy wait in a client-side backlog;
// that wait is part of their queue time and TTFT, as an open-loop user
// would see it. A second thread polls every daemon's `stats` once a second
// (summed over the fleet, sum_stats) and reads their RSS from /proc when
// their pids are known.
//
// run_load() stops by itself: arrivals end at `duration_s`; requests already
// arrived are sent and awaited for at most `drain_timeout_s` more, then the
// ones still open are recorded as lost.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/loadgen_stats.h"
#include "bench/workload.h"

namespace kvtier::bench {

struct LoadOptions {
  std::vector<std::string> sockets;  // one per daemon (or a router); arrivals go round-robin
  // Where `stats` is asked, every daemon behind a router; empty: sockets.
  std::vector<std::string> stats_sockets;
  std::string api = "jsonrpc";  // how requests are sent: jsonrpc | http (loadgen_wire.h)
  double rate = 4;              // arrivals per second (Poisson), over all daemons
  int concurrency = 8;          // connections to each daemon = its requests in flight
  double duration_s = 30;
  std::string kinds = "abcd";
  std::uint64_t seed = 1;
  int context = 256;             // the model's positions (health.model.block_size)
  bool word_tokens = false;      // the model reads GPT-2's BPE (Workload, gpt2_bpe_vocab)
  std::vector<int> daemon_pids;  // for RSS (their sum); empty = unknown
  bool progress = true;          // a progress line on stderr, redrawn every second
  double drain_timeout_s = 120;
  std::string label;  // printed at the start of the progress line
};

struct RequestRecord {
  long index = 0;
  WorkItem item;
  int daemon = 0;  // index into LoadOptions::sockets
  int connection = -1;
  // Seconds since the run started; -1 = did not happen.
  double arrival_s = -1, sent_s = -1, first_token_s = -1, done_s = -1;
  // The daemon's own timings (ms, from its submission); -1 = absent.
  double queue_ms = -1, daemon_ttft_ms = -1, total_ms = -1;
  int prompt_tokens = 0, completion_tokens = 0;
  TierCounts cached;  // cached_tokens by tier; zeros when absent
  std::string finish_reason;
  std::string error;  // empty = answered with a result
  std::vector<int> tokens;
  std::string text;

  bool ok() const { return error.empty() && done_s >= 0; }
  // Time to first token from arrival, as the user saw it (client clock;
  // the daemon's ttft plus the client-side wait when no token was streamed).
  double ttft_ms() const;
  // Client-side backlog wait plus the daemon's queue_ms.
  double queue_total_ms() const;
  double tokens_per_s() const;
  int cached_total() const;
  // The deepest tier that served part of the prompt: 0 = none (a miss),
  // 1 = L1 only, 2 = L2 (and maybe L1), 3 = L3 took part, 4 = the remote tier.
  int hit_tier() const;
};

struct StatsSample {
  double t_s = 0;
  nlohmann::json stats;  // the `stats` result as the daemon sent it
  long rss_kb = -1;      // -1 = unknown
};

struct LoadResult {
  std::vector<RequestRecord> records;
  std::vector<StatsSample> samples;  // one per second
  nlohmann::json stats_before, stats_after;
  double elapsed_s = 0;  // first arrival window start to the last answer
  double duration_s = 0;
  std::string error;  // set when the run could not start (no connection)
  long lost() const;  // arrived but never answered
  long failed() const;
};

LoadResult run_load(const LoadOptions& options);

// VmRSS of `pid` in kB from /proc/<pid>/status; -1 if unreadable.
long read_rss_kb(int pid);

}  // namespace kvtier::bench

// Drives a running kvtierd over its socket with an open-loop workload and
// reports what users would see (docs/bench.md):
//
//   build/bench/loadgen --socket /tmp/k.sock --workload a,b,c,d --rate 8
//                       --concurrency 8 --duration 60 --seed 1 [--pid PID] [--out-prefix run1]
//
// --api http sends the same requests as streamed POST /v1/completions
// (docs/http.md) instead of JSON-RPC generate, on the same socket.
// --socket given more than once drives a fleet: arrivals go to the daemons
// round-robin, `concurrency` connections each, and the stats are summed.
//
// Prints a progress line while it runs, then a table; writes
// <prefix>-requests.csv (one row per request), <prefix>-stats.csv (one row
// per second of the daemon's `stats`) and <prefix>-config.csv (the run's
// settings, for scripts/plot_soak.sh's titles). Exit status 1 when a
// request was lost or failed, 2 on a usage error or an unreachable daemon.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench/loadgen_report.h"
#include "bench/loadgen_run.h"
#include "ctl/rpc_client.h"

using namespace kvtier::bench;

int main(int argc, char** argv) {
  CLI::App app{"kvtier load generator: open-loop Poisson arrivals against a running kvtierd"};
  LoadOptions o;
  std::string workload = "a,b,c,d";
  std::string prefix = "loadgen";
  bool quiet = false;
  app.add_option("--socket", o.sockets,
                 "kvtierd's socket; more than one: a fleet, sent requests round-robin")
      ->required();
  app.add_option("--api", o.api,
                 "How requests are sent: jsonrpc (generate) or http (/v1/completions)")
      ->capture_default_str()
      ->check(CLI::IsMember({"jsonrpc", "http"}));
  app.add_option("--workload", workload,
                 "Mix of a (shared system prompt), b (multi-turn chats), c (priority mix with a "
                 "low-priority batch job), d (random prompts), e (many applications' system "
                 "prompts), f (long documents after a shared preamble, new and revisited)")
      ->capture_default_str();
  app.add_option("--rate", o.rate, "Arrivals per second (Poisson), over all daemons")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", o.concurrency,
                 "Connections to each daemon, one request in flight on each")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--duration", o.duration_s, "Seconds of arrivals")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--drain-timeout", o.drain_timeout_s,
                 "Seconds to wait for answers after the last arrival; later ones count as lost")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Workload and arrival seed")->capture_default_str();
  app.add_option("--pid", o.daemon_pids,
                 "kvtierd's pid, for its RSS (default: health.pid if sent); one per --socket");
  app.add_option("--out-prefix", prefix,
                 "CSV files: PREFIX-requests.csv, PREFIX-stats.csv, PREFIX-config.csv")
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "No progress line");
  CLI11_PARSE(app, argc, argv);
  auto kinds = parse_kinds(workload);
  if (!kinds) {
    std::fprintf(stderr, "loadgen: --workload takes letters a..f, e.g. a,b,c,d\n");
    return 2;
  }
  o.kinds = *kinds;
  o.progress = !quiet;

  const bool pids_given = !o.daemon_pids.empty();
  if (pids_given && o.daemon_pids.size() != o.sockets.size()) {
    std::fprintf(stderr, "loadgen: give one --pid per --socket, or none\n");
    return 2;
  }
  Settings settings;  // for the plots' titles, from the first daemon's health
  for (const std::string& socket : o.sockets) {
    auto client = kvtier::ctl::RpcClient::connect(socket);
    if (!client) {
      std::fprintf(stderr, "loadgen: %s\n", client.error().message.c_str());
      return 2;
    }
    int pid = 0;  // 0: unknown, no RSS
    if (auto h = client->call("health", nlohmann::json::object()); h && h->is_object()) {
      if (const auto m = h->find("model"); m != h->end() && m->is_object()) {
        o.context = m->value("block_size", o.context);
        o.word_tokens = gpt2_bpe_vocab(m->value("vocab_size", 0));
        if (settings.empty())
          settings.emplace_back("model", "n_layer " + std::to_string(m->value("n_layer", 0)) +
                                             " n_embd " + std::to_string(m->value("n_embd", 0)) +
                                             " context " + std::to_string(o.context));
      }
      pid = h->value("pid", 0);
    }
    if (!pids_given) o.daemon_pids.push_back(pid);
  }

  const LoadResult result = run_load(o);
  if (!result.error.empty()) {
    std::fprintf(stderr, "loadgen: %s\n", result.error.c_str());
    return 2;
  }
  const Summary s = summarize(result);
  std::printf(
      "workload %s over %s, rate %.2f/s, %zu daemon(s), concurrency %d each, duration %.0f s, "
      "seed %llu\n",
      o.kinds.c_str(), o.api.c_str(), o.rate, o.sockets.size(), o.concurrency, o.duration_s,
      static_cast<unsigned long long>(o.seed));
  print_summary(s, stdout);
  const bool wrote = write_requests_csv(prefix + "-requests.csv", result) &&
                     write_stats_csv(prefix + "-stats.csv", result) &&
                     write_config_csv(prefix + "-config.csv", o, result, settings);
  if (wrote) std::printf("wrote %s-{requests,stats,config}.csv\n", prefix.c_str());
  return s.lost == 0 && s.failed == 0 && wrote ? 0 : 1;
}

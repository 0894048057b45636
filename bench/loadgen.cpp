// Drives a running kvtierd over its socket with an open-loop workload and
// reports what users would see (docs/bench.md):
//
//   build/bench/loadgen --socket /tmp/k.sock --workload a,b,c,d --rate 8
//                       --concurrency 8 --duration 60 --seed 1 [--pid PID] [--out-prefix run1]
//
// Prints a progress line while it runs, then a table; writes
// <prefix>-requests.csv (one row per request) and <prefix>-stats.csv (one
// row per second of the daemon's `stats`). Exit status 1 when a request was
// lost or failed, 2 on a usage error or an unreachable daemon.
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
  app.add_option("--socket", o.socket, "kvtierd's socket")->required();
  app.add_option("--workload", workload,
                 "Mix of a (shared system prompt), b (multi-turn chats), c (priority mix with a "
                 "low-priority batch job), d (random prompts)")
      ->capture_default_str();
  app.add_option("--rate", o.rate, "Arrivals per second (Poisson)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", o.concurrency, "Connections, one request in flight on each")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--duration", o.duration_s, "Seconds of arrivals")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--drain-timeout", o.drain_timeout_s,
                 "Seconds to wait for answers after the last arrival; later ones count as lost")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Workload and arrival seed")->capture_default_str();
  app.add_option("--pid", o.daemon_pid, "kvtierd's pid, for its RSS (default: health.pid if sent)");
  app.add_option("--out-prefix", prefix, "CSV files: PREFIX-requests.csv, PREFIX-stats.csv")
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "No progress line");
  CLI11_PARSE(app, argc, argv);
  auto kinds = parse_kinds(workload);
  if (!kinds) {
    std::fprintf(stderr, "loadgen: --workload takes letters a..d, e.g. a,b,c,d\n");
    return 2;
  }
  o.kinds = *kinds;
  o.progress = !quiet;

  auto client = kvtier::ctl::RpcClient::connect(o.socket);
  if (!client) {
    std::fprintf(stderr, "loadgen: %s\n", client.error().message.c_str());
    return 2;
  }
  if (auto h = client->call("health", nlohmann::json::object()); h && h->is_object()) {
    if (h->contains("model")) o.context = (*h)["model"].value("block_size", o.context);
    if (o.daemon_pid == 0) o.daemon_pid = h->value("pid", 0);
  }

  const LoadResult result = run_load(o);
  if (!result.error.empty()) {
    std::fprintf(stderr, "loadgen: %s\n", result.error.c_str());
    return 2;
  }
  const Summary s = summarize(result);
  std::printf("workload %s, rate %.2f/s, concurrency %d, duration %.0f s, seed %llu\n",
              o.kinds.c_str(), o.rate, o.concurrency, o.duration_s,
              static_cast<unsigned long long>(o.seed));
  print_summary(s, stdout);
  const bool wrote = write_requests_csv(prefix + "-requests.csv", result) &&
                     write_stats_csv(prefix + "-stats.csv", result);
  if (wrote) std::printf("wrote %s-requests.csv, %s-stats.csv\n", prefix.c_str(), prefix.c_str());
  return s.lost == 0 && s.failed == 0 && wrote ? 0 : 1;
}

// The soak (docs/bench.md): starts kvtierd itself with tiers small enough that
// every one fills and demotes, runs workloads a+b+c for --duration seconds
// and checks that the daemon held up:
//
//   requests     none lost, none failed, the daemon's counters agree
//   rss          the daemon's RSS grew < 5% from the end of warm-up to the end
//   blocks       block conservation in every `stats` sample: blocks_used +
//                blocks_free constant, each tier's used <= its capacity
//   tiers        every configured tier filled and (L2, L3) received demotions
//                (skipped when `stats` has no cache figures)
//   cold         a sample of answers, re-sent with a fresh cache_salt (a cold
//                cache), come back with bit-identical tokens
//   ttft         p99 TTFT reported; a failure only above --max-p99-ttft-ms
//
// Exit status 0 when every check passed, 1 otherwise, 2 on a usage error or a
// daemon that would not start. --compare instead runs the same workload on
// three daemon configurations one after the other (L1 only + recompute;
// L1+L2; L1+L2+L3 + swap) and prints them side by side. --fleet N runs a
// fleet of N daemons, arrivals round-robin over them (workload e by
// default: many applications' system prompts), twice: as islands, each with
// its own tiers only, and sharing a remote tier on a redis-server of the
// soak's own; side by side, with the requests and cold checks of each.
// --fleet N --router compares round-robin with kvtier-router on the same
// arrivals (--router-first: the router's half first, as a later half runs
// on a machine that may have slowed); adding --kill-at S runs the router's
// half alone with daemon 0 SIGKILLed S seconds in and started again
// --kill-for seconds later, and checks that no request is lost (only those
// already streaming may fail) and that the router sends it requests again
// within 2 s of its return.
//
// --gpt2-124m runs on a GPT-2 124M-shaped model of random weights, written
// into --out at the start (bench/soak_model.h) and removed at the end, with
// tiers in gigabytes and workload f (long documents); every L3 slab is
// removed after its run too.
//
//   build/bench/soak [--duration 600] [--out DIR] [--kvtierd PATH] [--compare | --fleet 3]
//   build/bench/soak --gpt2-124m [--duration 600] [--out DIR]
//   build/bench/soak --fleet 3 --router [--router-first] [--kill-at 20 [--kill-for 5]]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "bench/loadgen_daemon.h"
#include "bench/loadgen_report.h"
#include "bench/loadgen_run.h"
#include "bench/redis_process.h"
#include "bench/soak_model.h"
#include "ctl/rpc_client.h"
#include "engine/model/kv_layout.h"
#include "util/byte_size.h"

using namespace kvtier::bench;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// --gpt2-124m's arrivals and connections, unless given (docs/bench.md: what a
// 2-core machine serves while new documents push about 8 GiB through L3 in
// 10 minutes), and how long it waits for the last answers: a request there
// takes seconds, not milliseconds.
constexpr double kGpt2Rate = 0.5;
constexpr int kGpt2Concurrency = 4;
constexpr double kGpt2DrainTimeout = 300;

struct SoakOptions {
  std::string kvtierd, router, model, out = "soak-out", workload = "a,b,c";
  double duration_s = 600, rate = 6, warmup_s = -1, max_p99_ttft_ms = 0, drain_timeout_s = 120;
  int concurrency = 6, verify = 16, page_size = 16, threads = 0;
  int l1_blocks = 24, l2_blocks = 32, l3_blocks = 96;
  std::uint64_t l1_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // 0: the blocks above
  bool gpt2_124m = false;               // a GPT-2 124M-shaped model of random weights, tiers in GiB
  int fleet = 0;                        // daemons of a --fleet run; 0 = none
  bool via_router = false;              // --fleet: round-robin against kvtier-router
  bool router_first = false;            // --router: its half first (the machine's drift)
  double kill_at_s = 0;                 // --router: daemon 0 SIGKILLed this far in; 0 = never
  double kill_for_s = 5;                // and started again on its socket this much later
  std::size_t redis_bytes = 256 << 20;  // the fleet's redis-server maxmemory
  std::uint64_t seed = 1;
  bool compare = false, quiet = false;
};

struct TierSetup {
  std::string label;
  bool l2 = true, l3 = true;
  std::string preemption;  // "" = the daemon's default
  std::string remote;      // the remote tier's address; "" = none
  bool router = false;     // the load goes through kvtier-router instead of round-robin
};

struct Check {
  std::string name;
  enum { kPass, kFail, kSkip } state;
  std::string detail;
};

// Bytes of one KV block of the model at `page` tokens (float32 K and V per
// layer); 64 KiB for the bundled model at 16.
std::size_t block_bytes(const std::string& model_dir, int page) {
  std::ifstream in(fs::path(model_dir) / "config.json");
  json c = json::parse(in, nullptr, false);
  const long layers = c.is_object() ? c.value("n_layer", 4) : 4;
  const long embd = c.is_object() ? c.value("n_embd", 128) : 128;
  return static_cast<std::size_t>(layers * 2 * embd * page * 4);
}

// The model folder's name, for the plots' titles ("models/x/" is x too).
std::string model_name(const std::string& model_dir) {
  fs::path p = fs::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

int model_context(const std::string& model_dir) {
  std::ifstream in(fs::path(model_dir) / "config.json");
  json c = json::parse(in, nullptr, false);
  if (!c.is_object()) return 256;
  return c.value("block_size", c.value("n_positions", 256));  // nanoGPT or Hugging Face
}

bool model_reads_gpt2_bpe(const std::string& model_dir) {
  std::ifstream in(fs::path(model_dir) / "config.json");
  json c = json::parse(in, nullptr, false);
  return c.is_object() && gpt2_bpe_vocab(c.value("vocab_size", 0));
}

// "227 blocks (256.0 MiB)"
std::string blocks_text(int blocks, std::size_t block) {
  return std::to_string(blocks) + " blocks (" + kvtier::util::bytes_text(blocks * block) + ")";
}

// The tiers of a run, for its summary line.
std::string tiers_text(const SoakOptions& o) {
  const std::size_t block = block_bytes(o.model, o.page_size);
  return "L1 " + blocks_text(o.l1_blocks, block) + ", L2 " + blocks_text(o.l2_blocks, block) +
         ", L3 " + blocks_text(o.l3_blocks, block);
}

// The value to give a setting the daemon may take as a flag or an option.
void add_switch(std::vector<std::string>& args, const std::map<std::string, std::string>& flags,
                const std::string& name, bool on) {
  auto it = flags.find(name);
  if (it == flags.end()) return;
  if (it->second.empty()) {
    if (on) args.push_back("--" + name);
    return;
  }
  args.push_back("--" + name);
  const std::string& type = it->second;
  if (type.find("on") != std::string::npos && type.find('{') != std::string::npos)
    args.push_back(on ? "on" : "off");
  else
    args.push_back(on ? "true" : "false");
}

// kvtierd's arguments for one setup; flags this kvtierd does not know are
// left out and named in `missing`.
std::vector<std::string> daemon_args(const SoakOptions& o, const TierSetup& t,
                                     const std::map<std::string, std::string>& flags,
                                     const std::string& l3_dir, std::vector<std::string>& missing) {
  const std::size_t block = block_bytes(o.model, o.page_size);
  std::vector<std::string> args = {"--model",         o.model,
                                   "--log-level",     "warning",
                                   "--policy",        "priority",
                                   "--page-size",     std::to_string(o.page_size),
                                   "--max-kv-tokens", std::to_string(o.l1_blocks * o.page_size),
                                   "--drain-timeout", "30"};
  if (o.threads > 0) args.insert(args.end(), {"--threads", std::to_string(o.threads)});
  auto opt = [&](const std::string& name, const std::string& value) {
    if (flags.contains(name)) {
      args.insert(args.end(), {"--" + name, value});
    } else {
      missing.push_back("--" + name);
    }
  };
  if (t.l2) {
    add_switch(args, flags, "prefix-cache", true);
    opt("l1-bytes", std::to_string(o.l1_blocks * block));
    opt("l2-bytes", std::to_string(o.l2_blocks * block));
  } else if (flags.contains("no-prefix-cache")) {
    args.push_back("--no-prefix-cache");  // L1 only: the seeds' engine, nothing kept
  } else {
    opt("l2-bytes", "0");
  }
  if (t.l3) {
    opt("l3-path", l3_dir);
    opt("l3-bytes", std::to_string(o.l3_blocks * block));
  }
  if (!t.preemption.empty()) opt("preemption", t.preemption);
  if (!t.remote.empty()) {
    opt("remote", t.remote);
    opt("remote-namespace", "soak");
  }
  return args;
}

// Re-sends a sample of the answered requests, each to the daemon that
// answered it, with a fresh cache_salt and greedy-or-seeded sampling as
// before; their tokens must not change. With `remote_hits`, the sample is of
// answers the remote tier served part of (another daemon computed it).
Check check_cold(const SoakOptions& o, const std::vector<std::string>& sockets, const LoadResult& r,
                 bool remote_hits) {
  std::vector<const RequestRecord*> pool;
  for (const auto& q : r.records)
    if (q.ok() && (remote_hits ? q.cached[kvtier::Tier::kRemote] > 0 : q.cached_total() > 0))
      pool.push_back(&q);
  if (remote_hits && pool.empty())
    return {"cold", Check::kFail, "no answer was served from the remote tier"};
  const bool any_cached = !pool.empty();
  if (pool.empty())  // a daemon without cached_tokens: any answered request
    for (const auto& q : r.records)
      if (q.ok() && q.item.kind != 'd') pool.push_back(&q);
  if (pool.empty()) return {"cold", Check::kFail, "no answered request to compare"};
  std::mt19937_64 rng(o.seed * 7919 + 1);
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(std::min<std::size_t>(pool.size(), o.verify));
  std::vector<kvtier::ctl::RpcClient> clients;
  for (const std::string& socket : sockets) {
    auto client = kvtier::ctl::RpcClient::connect(socket);
    if (!client) return {"cold", Check::kFail, client.error().message};
    clients.push_back(std::move(*client));
  }
  bool salted = true;
  int same = 0;
  std::string first_diff;
  for (std::size_t i = 0; i < pool.size(); ++i) {
    const RequestRecord& q = *pool[i];
    json params = {{"prompt", q.item.prompt},
                   {"max_tokens", q.item.max_tokens},
                   {"temperature", q.item.temperature},
                   {"seed", q.item.seed},
                   {"priority", 0}};
    if (salted)
      params["cache_salt"] = "soak-cold-" + std::to_string(o.seed) + "-" + std::to_string(i);
    kvtier::ctl::RpcClient& client = clients.at(q.daemon);
    auto a = client.call("generate", params);
    if (!a && salted && a.error().message.find("cache_salt") != std::string::npos) {
      salted = false;  // this kvtierd has no salts: compare with a plain re-send
      params.erase("cache_salt");
      a = client.call("generate", params);
    }
    if (!a) return {"cold", Check::kFail, "re-send failed: " + a.error().message};
    const auto tokens = a->value("tokens", std::vector<int>{});
    if (tokens == q.tokens) {
      ++same;
    } else if (first_diff.empty()) {
      first_diff = "request " + std::to_string(q.index) + " (kind " + q.item.kind + ", " +
                   std::to_string(q.cached_total()) +
                   " cached tokens) differs from its cold answer";
    }
  }
  std::string detail = std::to_string(same) + "/" + std::to_string(pool.size()) +
                       (remote_hits  ? " answers with prefixes from the remote tier"
                        : any_cached ? " answers with cached prefixes"
                                     : " answers (no cached_tokens reported)") +
                       (salted ? " identical to a cold (fresh cache_salt) answer"
                               : " identical to a re-send (this kvtierd takes no cache_salt)");
  if (!first_diff.empty()) detail += "; " + first_diff;
  return {"cold", same == static_cast<int>(pool.size()) ? Check::kPass : Check::kFail, detail};
}

long median_rss(const std::vector<StatsSample>& s, std::size_t from, std::size_t to) {
  std::vector<long> v;
  for (std::size_t i = from; i < to && i < s.size(); ++i)
    if (s[i].rss_kb > 0) v.push_back(s[i].rss_kb);
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// No request lost or failed, and the daemons' counters agree.
Check check_requests(const LoadResult& r, const Summary& s) {
  long bad_reason = 0;
  for (const auto& q : r.records)
    if (q.ok() && q.finish_reason != "length" && q.finish_reason != "stop" &&
        q.finish_reason != "context")
      ++bad_reason;
  const StatsView after = view_stats(r.stats_after);
  std::string detail = std::to_string(s.ok) + "/" + std::to_string(s.arrived) + " answered, " +
                       std::to_string(s.failed) + " failed, " + std::to_string(s.lost) + " lost";
  bool ok = s.arrived > 0 && s.failed == 0 && s.lost == 0 && bad_reason == 0;
  if (!r.stats_after.is_null()) {
    const long accounted = after.completed + after.cancelled + after.failed;
    detail += "; daemon: " + std::to_string(s.daemon.submitted) + " submitted, " +
              std::to_string(after.completed) + " completed, " + std::to_string(after.failed) +
              " failed, " + std::to_string(after.pending) + " pending";
    ok = ok && after.failed == 0 && after.pending == 0 && accounted == after.submitted &&
         s.daemon.submitted == s.arrived;
  }
  if (!s.first_error.empty()) detail += "; first error: " + s.first_error;
  return {"requests", ok ? Check::kPass : Check::kFail, detail};
}

std::vector<Check> soak_checks(const SoakOptions& o, const LoadResult& r, const Summary& s,
                               const TierSetup& setup) {
  std::vector<Check> checks = {check_requests(r, s)};
  {  // rss
    std::size_t w = 0;
    while (w < r.samples.size() && r.samples[w].t_s < o.warmup_s) ++w;
    const long at_warm = median_rss(r.samples, w > 0 ? w - 1 : 0, w + 2);
    const std::size_t n = r.samples.size();
    const long at_end = median_rss(r.samples, n >= 3 ? n - 3 : 0, n);
    if (at_warm <= 0 || at_end <= 0 || n < w + 3) {
      checks.push_back({"rss", Check::kSkip, "too few RSS samples after warm-up"});
    } else {
      const double growth = 100.0 * (at_end - at_warm) / at_warm;
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "%.1f MiB after %.0f s warm-up -> %.1f MiB at the end (%+.2f%%)",
                    at_warm / 1024.0, o.warmup_s, at_end / 1024.0, growth);
      checks.push_back({"rss", growth < 5.0 ? Check::kPass : Check::kFail, buf});
    }
  }
  {  // blocks
    long bad = 0, total = -1;
    std::string first;
    for (const auto& sample : r.samples) {
      const StatsView v = view_stats(sample.stats);
      std::string why;
      if (v.blocks_used < 0 || v.blocks_free < 0)
        why = "negative or missing blocks_used/free";
      else if (total < 0)
        total = v.blocks_used + v.blocks_free;  // idle at the start: the whole budget
      // Blocks in flight to or from L3 are neither used nor free for a
      // moment, so the sum may dip below the budget; it may never pass it.
      else if (v.blocks_used + v.blocks_free > total || v.blocks_used > total)
        why = "blocks_used + blocks_free = " + std::to_string(v.blocks_used + v.blocks_free) +
              ", over the budget " + std::to_string(total);
      for (int t = 0; t < 3 && why.empty(); ++t)  // the remote tier's capacity is Redis's
        if (v.tier[t].present && v.tier[t].capacity >= 0 && v.tier[t].used > v.tier[t].capacity)
          why = "L" + std::to_string(t + 1) + " holds " + std::to_string(v.tier[t].used) +
                " blocks over its capacity " + std::to_string(v.tier[t].capacity);
      if (!why.empty() && ++bad == 1)
        first = why + " at " + std::to_string(static_cast<int>(sample.t_s)) + " s";
    }
    std::string detail = std::to_string(r.samples.size()) + " samples, KV budget " +
                         std::to_string(total) + " blocks";
    if (bad) detail += "; " + std::to_string(bad) + " bad, first: " + first;
    checks.push_back({"blocks", r.samples.empty() || bad ? Check::kFail : Check::kPass, detail});
  }
  {  // tiers fill and demote
    StatsView peak;
    bool any = false;
    for (const auto& sample : r.samples) {
      const StatsView v = view_stats(sample.stats);
      if (!v.has_cache) continue;
      any = true;
      for (int t = 0; t < 3; ++t) {
        peak.tier[t].present = peak.tier[t].present || v.tier[t].present;
        peak.tier[t].used = std::max(peak.tier[t].used, v.tier[t].used);
        peak.tier[t].capacity = std::max(peak.tier[t].capacity, v.tier[t].capacity);
      }
    }
    if (!any) {
      checks.push_back({"tiers", Check::kSkip, "this kvtierd's stats have no cache figures"});
    } else {
      bool ok = true;
      std::string detail;
      const bool wanted[3] = {true, setup.l2, setup.l3};
      for (int t = 0; t < 3; ++t) {
        if (!wanted[t] || !peak.tier[t].present) continue;
        const long cap = peak.tier[t].capacity, used = peak.tier[t].used;
        const bool full = cap > 0 && used * 10 >= cap * 9;
        const bool demoted = t == 0 || s.daemon.tier[t].demotions > 0;
        ok = ok && full && demoted;
        detail += "L" + std::to_string(t + 1) + " peak " + std::to_string(used) + "/" +
                  std::to_string(cap);
        if (t > 0) detail += ", " + std::to_string(s.daemon.tier[t].demotions) + " demotions in";
        detail += "; ";
      }
      checks.push_back({"tiers", ok ? Check::kPass : Check::kFail, detail});
    }
  }
  {
    char buf[160];
    std::snprintf(buf, sizeof buf, "p99 %.1f ms, p50 %.1f ms, mean %.1f ms over %ld requests",
                  s.ttft.p99, s.ttft.p50, s.ttft.mean, s.ttft.count);
    const bool ok = o.max_p99_ttft_ms <= 0 || s.ttft.p99 <= o.max_p99_ttft_ms;
    checks.push_back({"ttft", ok ? Check::kPass : Check::kFail, buf});
  }
  return checks;
}

// Removes its folders (recursively) when it goes: the L3 slabs after their
// daemons, the generated model after the runs.
struct RemoveOnExit {
  std::vector<fs::path> paths;
  ~RemoveOnExit() {
    for (const fs::path& p : paths) {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  }
};

struct RunOutput {
  LoadResult result;
  Summary summary;
  std::vector<Check> checks;
  bool started = false;
  double lone_ttft_ms = -1;  // one request of the workload alone, before the arrivals
  json router_fleet;         // the router's `fleet` at the end of a run through it
};

// kvtier-router in front of `daemons`, once it uses every one of them.
std::expected<std::unique_ptr<DaemonProcess>, std::string> start_router(
    const SoakOptions& o, const std::vector<std::string>& daemons, const std::string& log) {
  std::vector<std::string> args = {"--model", o.model};
  for (const auto& d : daemons) args.insert(args.end(), {"--daemon", d});
  auto router = DaemonProcess::start(o.router, args, log);
  if (!router) return router;
  for (int tries = 0; tries < 500; ++tries) {
    auto c = kvtier::ctl::RpcClient::connect((*router)->socket());
    auto h = c ? c->call("health", json::object()) : std::unexpected(c.error());
    if (h && h->value("/router/usable"_json_pointer, 0) == static_cast<int>(daemons.size()))
      return router;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::unexpected("kvtier-router did not take every daemon in 10 s; see " + log);
}

// The router's `fleet` answer, or null.
json router_fleet(const std::string& socket) {
  auto c = kvtier::ctl::RpcClient::connect(socket);
  if (!c) return nullptr;
  auto f = c->call("fleet", json::object());
  return f ? *f : json(nullptr);
}

// The TTFT of one request of the workload (a draw of its own), sent alone
// under a cache_salt of its own; -1 when it failed.
double lone_ttft_ms(const std::string& socket, const LoadOptions& lo) {
  Workload w(lo.kinds, lo.seed ^ 0x9E3779B97F4A7C15ULL, lo.context, lo.word_tokens);
  const WorkItem item = w.next();
  auto c = kvtier::ctl::RpcClient::connect(socket);
  if (!c) return -1;
  auto r = c->call("generate", {{"prompt", item.prompt},
                                {"max_tokens", 1},
                                {"temperature", 0},
                                {"cache_salt", "soak-lone"}});
  return r && r->contains("timings") ? (*r)["timings"].value("ttft_ms", -1.0) : -1;
}

// --kill-at: what happened to daemon 0 and how the router took it, in
// seconds from the start of the arrivals; -1 = did not happen.
struct KillReport {
  double killed_s = -1, back_s = -1;  // SIGKILLed; accepting again on its socket
  double usable_s = -1;               // the router's `fleet` says it is usable again
  double routed_s = -1;               // its own `stats` counts a request
  std::string error;                  // it could not be started again
};

// Kills daemon `d` at o.kill_at_s, starts it again o.kill_for_s later on
// the same socket, then watches the router take it back (every 10 ms, at
// most 10 s). Runs beside the load, on a thread of its own.
KillReport kill_and_return(const SoakOptions& o, DaemonProcess& d, const std::string& router,
                           const std::string& log) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto since = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const auto at = [t0](double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  KillReport k;
  std::this_thread::sleep_until(at(o.kill_at_s));
  d.kill();
  k.killed_s = since();
  std::this_thread::sleep_until(at(o.kill_at_s + o.kill_for_s));
  if (auto ok = d.restart(log); !ok) {
    k.error = ok.error();
    return k;
  }
  k.back_s = since();
  while (since() < k.back_s + 10 && (k.usable_s < 0 || k.routed_s < 0)) {
    if (k.usable_s < 0) {
      const json f = router_fleet(router);
      if (f.is_object() && f["daemons"].is_array() && !f["daemons"].empty() &&
          f["daemons"][0].value("usable", false))
        k.usable_s = since();
    }
    if (k.routed_s < 0) {
      auto c = kvtier::ctl::RpcClient::connect(d.socket());
      auto s = c ? c->call("stats", json::object()) : std::unexpected(c.error());
      if (s && view_stats(*s).submitted > 0) k.routed_s = since();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return k;
}

// The checks of a run with a daemon killed: nothing lost; every request
// that failed had started streaming (the router retries the others); and
// the router used the daemon again within 2 s of its return.
std::vector<Check> kill_checks(const LoadResult& r, const Summary& s, const KillReport& k) {
  long failed = 0, failed_unstreamed = 0;
  std::string first_unstreamed;
  for (const auto& q : r.records) {
    if (q.error.empty()) continue;
    ++failed;
    if (q.first_token_s >= 0) continue;
    if (++failed_unstreamed == 1) first_unstreamed = q.error;
  }
  std::vector<Check> checks;
  checks.push_back(
      {"requests",
       s.arrived > 0 && s.lost == 0 && failed_unstreamed == 0 ? Check::kPass : Check::kFail,
       std::to_string(s.ok) + "/" + std::to_string(s.arrived) + " answered, " +
           std::to_string(failed) + " failed (each after part of its answer was streamed), " +
           std::to_string(failed_unstreamed) + " failed before streaming, " +
           std::to_string(s.lost) + " lost" +
           (first_unstreamed.empty() ? "" : "; first of those: " + first_unstreamed)});
  char detail[256];
  if (!k.error.empty()) {
    checks.push_back({"return", Check::kFail, "daemon 0 did not start again: " + k.error});
    return checks;
  }
  const double usable = k.usable_s >= 0 ? k.usable_s - k.back_s : -1;
  const double routed = k.routed_s >= 0 ? k.routed_s - k.back_s : -1;
  std::snprintf(detail, sizeof detail,
                "daemon 0 killed at %.1f s, back at %.1f s; usable again after %.2f s, its first "
                "request after %.2f s (-1: not within 10 s)",
                k.killed_s, k.back_s, usable, routed);
  checks.push_back(
      {"return", usable >= 0 && routed >= 0 && routed <= 2 ? Check::kPass : Check::kFail, detail});
  return checks;
}

// Says so when the arrivals outran the daemon: its TTFT is then mostly
// queueing (TTFT p50 over 3x a lone request's), and the run measures what
// the tiers hold, not latency.
void warn_if_outrun(const RunOutput& r, double rate) {
  const double p50 = r.summary.ttft.p50;
  if (r.lone_ttft_ms <= 0 || p50 <= 3 * r.lone_ttft_ms) return;
  std::printf(
      "soak: warning: the arrivals outran kvtierd: TTFT p50 %.0f ms is %.1fx a lone request's "
      "%.0f ms (%.2f answers/s against %.2f arrivals/s); lower --rate for latency figures\n",
      p50, p50 / r.lone_ttft_ms, r.lone_ttft_ms, r.summary.requests_per_s, rate);
}

// Which checks a run makes: none (--compare), all of the soak's, or a
// fleet's (requests, cold, exit).
enum class Verify { kNone, kSoak, kFleet };

// Runs the workload on `daemons` kvtierd with `setup` (round-robin over
// them); each daemon's log, L3 and CSVs are named after `tag` in --out.
RunOutput run_setup(const SoakOptions& o, const TierSetup& setup,
                    const std::map<std::string, std::string>& flags, const std::string& tag,
                    Verify verify, int daemons = 1) {
  RunOutput out;
  RemoveOnExit l3_dirs;  // declared first: goes after the daemons have stopped
  std::vector<std::unique_ptr<DaemonProcess>> fleet;
  std::vector<std::string> logs;
  for (int d = 0; d < daemons; ++d) {
    const std::string name = daemons == 1 ? tag : tag + "-" + std::to_string(d);
    const fs::path l3_dir = fs::path(o.out) / (name + "-l3");
    std::error_code ec;
    fs::remove_all(l3_dir, ec);  // a cold L3 every run
    fs::create_directories(l3_dir, ec);
    l3_dirs.paths.push_back(l3_dir);
    std::vector<std::string> missing;
    const auto args = daemon_args(o, setup, flags, fs::absolute(l3_dir).string(), missing);
    if (!missing.empty() && d == 0) {
      std::string m;
      for (const auto& f : missing) m += " " + f;
      std::fprintf(stderr, "soak: %s: this kvtierd has no%s; running without\n",
                   setup.label.c_str(), m.c_str());
    }
    logs.push_back((fs::path(o.out) / (name + "-kvtierd.log")).string());
    auto daemon = DaemonProcess::start(o.kvtierd, args, logs.back());
    if (!daemon) {
      std::fprintf(stderr, "soak: %s\n", daemon.error().c_str());
      return out;
    }
    fleet.push_back(std::move(*daemon));
  }
  out.started = true;
  LoadOptions lo;
  for (const auto& daemon : fleet) {
    lo.sockets.push_back(daemon->socket());
    lo.daemon_pids.push_back(daemon->pid());
  }
  lo.concurrency = o.concurrency;
  std::unique_ptr<DaemonProcess> router;
  if (setup.router) {
    auto started = start_router(o, lo.sockets, (fs::path(o.out) / (tag + "-router.log")).string());
    if (!started) {
      std::fprintf(stderr, "soak: %s\n", started.error().c_str());
      out.started = false;
      return out;
    }
    router = std::move(*started);
    // Every connection goes to the router: as many as the daemons had.
    lo.stats_sockets = std::exchange(lo.sockets, {router->socket()});
    lo.concurrency = o.concurrency * daemons;
  }
  lo.rate = o.rate;
  lo.duration_s = o.duration_s;
  lo.drain_timeout_s = o.drain_timeout_s;
  lo.kinds = *parse_kinds(o.workload);
  lo.seed = o.seed;
  lo.context = model_context(o.model);
  lo.word_tokens = model_reads_gpt2_bpe(o.model);
  lo.progress = !o.quiet;
  lo.label = setup.label + " ";
  out.lone_ttft_ms = lone_ttft_ms(lo.sockets.front(), lo);
  KillReport killed;
  std::thread killer;
  if (router && o.kill_at_s > 0)
    killer = std::thread(
        [&] { killed = kill_and_return(o, *fleet[0], router->socket(), logs[0] + ".restarted"); });
  out.result = run_load(lo);
  const bool killer_ran = killer.joinable();
  if (killer_ran) killer.join();
  if (!out.result.error.empty()) {
    std::fprintf(stderr, "soak: %s\n", out.result.error.c_str());
    out.started = false;
    return out;
  }
  out.summary = summarize(out.result);
  if (verify == Verify::kSoak) out.checks = soak_checks(o, out.result, out.summary, setup);
  if (verify == Verify::kFleet)
    out.checks = killer_ran ? kill_checks(out.result, out.summary, killed)
                            : std::vector<Check>{check_requests(out.result, out.summary)};
  if (verify != Verify::kNone)
    out.checks.push_back(
        // Through the router, remote hits are what it avoids: a run may have
        // none, and its sample is of answers any tier served part of.
        check_cold(o, lo.sockets, out.result,
                   verify == Verify::kFleet && !setup.remote.empty() && !setup.router));
  std::string unclean;
  if (router) {
    out.router_fleet = router_fleet(router->socket());
    if (!router->stop()) unclean = router->log_path();
  }
  for (std::size_t d = 0; d < fleet.size(); ++d)
    if (!fleet[d]->stop()) unclean += (unclean.empty() ? "" : ", ") + logs[d];
  if (verify != Verify::kNone)
    out.checks.push_back({"exit", unclean.empty() ? Check::kPass : Check::kFail,
                          unclean.empty()
                              ? "kvtierd stopped and exited 0"
                              : "kvtierd did not exit 0 after shutdown; see " + unclean});
  write_requests_csv((fs::path(o.out) / (tag + "-requests.csv")).string(), out.result);
  write_stats_csv((fs::path(o.out) / (tag + "-stats.csv")).string(), out.result);
  Settings settings = {{"label", setup.label}, {"model", model_name(o.model)}};
  if (!setup.preemption.empty()) settings.emplace_back("preemption", setup.preemption);
  if (!setup.remote.empty())
    settings.emplace_back("remote", "redis-server " + std::to_string(o.redis_bytes >> 20) + " MiB");
  write_config_csv((fs::path(o.out) / (tag + "-config.csv")).string(), lo, out.result, settings);
  return out;
}

// Prints each check of a run; true if none failed.
bool print_checks(const std::vector<Check>& checks, const std::string& prefix = "") {
  bool ok = true;
  for (const auto& c : checks) {
    const char* state = c.state == Check::kPass   ? "PASS"
                        : c.state == Check::kFail ? "FAIL"
                                                  : "skip";
    std::printf("%s%-4s %-8s %s\n", prefix.c_str(), state, c.name.c_str(), c.detail.c_str());
    ok = ok && c.state != Check::kFail;
  }
  return ok;
}

// --fleet: the same arrivals on o.fleet daemons as islands, then sharing a
// remote tier. Each run that shares one gets a fresh redis-server of the
// soak's own: a second run on the first one's Redis would find every prompt
// of the same arrivals there already.
int run_fleet(const SoakOptions& o, const std::map<std::string, std::string>& flags) {
  const std::string redis_binary = find_redis_server();
  // --router: both share the remote tier, so round-robin's misses of L1
  // are remote hits, as a fleet behind a plain load balancer has them.
  // --kill-at: the router's half alone, with daemon 0 killed and back.
  // The remote address is filled in with each run's redis-server.
  const TierSetup routed = {"router", true, true, "swap", "redis", true};
  std::vector<std::pair<std::string, TierSetup>> setups =
      o.kill_at_s > 0 ? std::vector<std::pair<std::string, TierSetup>>{{"router-kill", routed}}
      : o.via_router  ? std::vector<std::pair<std::string, TierSetup>>{{"round-robin",
                                                                        {"round-robin", true, true,
                                                                         "swap", "redis"}},
                                                                       {"router", routed}}
                      : std::vector<std::pair<std::string, TierSetup>>{
                            {"islands", {"islands", true, true, "swap", ""}},
                            {"shared", {"shared remote", true, true, "swap", "redis"}}};
  if (o.router_first) std::reverse(setups.begin(), setups.end());
  std::vector<std::pair<std::string, Summary>> rows;
  std::vector<std::vector<Check>> checks;
  std::string router_choices;
  for (auto [tag, setup] : setups) {
    std::unique_ptr<RedisProcess> redis;
    if (!setup.remote.empty()) {
      auto started = RedisProcess::start(redis_binary, o.redis_bytes);
      if (!started) {
        std::fprintf(stderr, "soak: %s\n", started.error().c_str());
        return 2;
      }
      redis = std::move(*started);
      setup.remote = redis->socket();
    }
    RunOutput r = run_setup(o, setup, flags, "fleet-" + tag, Verify::kFleet, o.fleet);
    if (!r.started) return 2;
    rows.emplace_back(setup.label, r.summary);
    checks.push_back(std::move(r.checks));
    if (r.router_fleet.is_object()) {
      std::string by_daemon;
      for (const json& d : r.router_fleet["daemons"])
        by_daemon += (by_daemon.empty() ? "" : " / ") + d.value("routed", json(0)).dump();
      router_choices = "router choices " + r.router_fleet["choices"].dump() +
                       ", requests by daemon " + by_daemon + ", blocks the chosen daemon held " +
                       r.router_fleet["routed_blocks"].dump();
    }
  }
  std::printf(
      "fleet of %d daemons, workload %s %s, rate %.2f/s, concurrency %d each, %.0f s "
      "each, seed %llu; each daemon %s; shared: a fresh redis-server a run on a Unix socket, "
      "maxmemory %zu MiB\n",
      o.fleet, o.workload.c_str(),
      o.kill_at_s > 0 ? "through kvtier-router, daemon 0 killed and back"
      : o.via_router  ? (o.router_first ? "through kvtier-router, then round-robin"
                                        : "round-robin, then through kvtier-router")
                      : "round-robin",
      o.rate, o.concurrency, o.duration_s, static_cast<unsigned long long>(o.seed),
      tiers_text(o).c_str(), o.redis_bytes >> 20);
  print_comparison(rows, stdout);
  if (!router_choices.empty()) std::printf("%s\n", router_choices.c_str());
  bool ok = true;
  for (std::size_t i = 0; i < rows.size(); ++i)
    ok = print_checks(checks[i], rows[i].first + ": ") && ok;
  std::printf("CSVs: %s/fleet-{%s}-{requests,stats,config}.csv\n", o.out.c_str(),
              o.kill_at_s > 0 ? "router-kill"
              : o.via_router  ? "round-robin,router"
                              : "islands,shared");
  std::printf("soak: %s\n", ok ? "all checks passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier soak: a long run against kvtierd with small tiers, and its checks"};
  SoakOptions o;
  o.kvtierd = default_kvtierd(argv[0]);
  o.router = default_router(argv[0]);
  o.model = (fs::path(KVTIER_SOURCE_DIR) / "models" / "fortunes-char").string();
  app.add_option("--kvtierd", o.kvtierd, "kvtierd binary")->capture_default_str();
  app.add_option("--model", o.model, "Model folder")->capture_default_str();
  app.add_option("--duration", o.duration_s,
                 "Seconds of arrivals (each configuration with --compare)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup_s,
                 "Seconds before the RSS baseline; default 20% of --duration, at least 5")
      ->capture_default_str();
  app.add_option("--rate", o.rate, "Arrivals per second")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", o.concurrency, "Connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--workload", o.workload, "Workload mix (see loadgen)")->capture_default_str();
  app.add_option("--seed", o.seed, "Workload seed")->capture_default_str();
  app.add_option("--threads", o.threads, "kvtierd --threads; 0 = its default")
      ->capture_default_str();
  auto* l1_blocks =
      app.add_option("--l1-blocks", o.l1_blocks, "L1 size in KV blocks (also --max-kv-tokens)")
          ->capture_default_str()
          ->check(CLI::Range(16, 1 << 20));
  auto* l2_blocks =
      app.add_option("--l2-blocks", o.l2_blocks, "L2 size in KV blocks")->capture_default_str();
  auto* l3_blocks =
      app.add_option("--l3-blocks", o.l3_blocks, "L3 size in KV blocks")->capture_default_str();
  // Sizes in bytes instead, rounded down to whole blocks of the model.
  app.add_option("--l1-bytes", o.l1_bytes, "L1 size in bytes (256M, 1GiB), instead of blocks")
      ->transform(CLI::AsSizeValue(false))
      ->excludes(l1_blocks);
  app.add_option("--l2-bytes", o.l2_bytes, "L2 size in bytes, instead of blocks")
      ->transform(CLI::AsSizeValue(false))
      ->excludes(l2_blocks);
  app.add_option("--l3-bytes", o.l3_bytes, "L3 size in bytes, instead of blocks")
      ->transform(CLI::AsSizeValue(false))
      ->excludes(l3_blocks);
  app.add_option("--drain-timeout", o.drain_timeout_s,
                 "Seconds to wait for answers after the last arrival; later ones count as lost")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--verify", o.verify, "Answers re-sent cold and compared")->capture_default_str();
  app.add_option("--max-p99-ttft-ms", o.max_p99_ttft_ms,
                 "Fail above this p99 TTFT; 0 = report only")
      ->capture_default_str();
  app.add_option("--out", o.out, "Folder for the CSVs and the daemon's log")->capture_default_str();
  app.add_flag("--compare", o.compare,
               "Run the workload on L1 only (recompute), L1+L2, L1+L2+L3 (swap) and compare");
  app.add_option("--fleet", o.fleet,
                 "Run a fleet of this many daemons (workload e unless --workload), as islands "
                 "and sharing a remote tier on a redis-server of the soak's own, and compare")
      ->check(CLI::Range(1, 16))
      ->excludes("--compare");
  app.add_flag("--router", o.via_router,
               "With --fleet: round-robin, then the same arrivals through kvtier-router "
               "(both sharing the remote tier), compared")
      ->needs("--fleet");
  app.add_flag("--router-first", o.router_first,
               "With --router: the router's half first, then round-robin (a machine that "
               "slows or speeds up over the run favours one half; swapping tells)")
      ->needs("--router");
  app.add_option("--kill-at", o.kill_at_s,
                 "With --router: the router's half alone, daemon 0 SIGKILLed this many seconds "
                 "in and started again on its socket --kill-for later; checks that no request "
                 "is lost and the router uses it again within 2 s")
      ->check(CLI::PositiveNumber)
      ->needs("--router");
  app.add_option("--kill-for", o.kill_for_s, "With --kill-at: seconds daemon 0 stays dead")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kvtier-router", o.router, "The kvtier-router binary for --router")
      ->capture_default_str();
  app.add_option("--redis-bytes", o.redis_bytes, "The fleet's redis-server maxmemory, bytes")
      ->capture_default_str();
  auto* gpt2_flag =
      app.add_flag("--gpt2-124m", o.gpt2_124m,
                   "Write a GPT-2 124M-shaped model of random weights (~500 MB) into "
                   "--out and soak it; unless given: workload f, --rate 0.5, --concurrency 4, "
                   "--drain-timeout 300, L1 256M, L2 1G, L3 8G. Removed at the end");
  app.add_flag("--quiet", o.quiet, "No progress line");
  gpt2_flag->excludes(app.get_option("--model"));
  CLI11_PARSE(app, argc, argv);
  if (o.gpt2_124m) {
    // Each default only where the flag is not given.
    auto preset = [&](const char* flag, auto& value, auto preset_value) {
      if (app.count(flag) == 0) value = preset_value;
    };
    preset("--workload", o.workload, std::string("f"));
    preset("--rate", o.rate, kGpt2Rate);
    preset("--concurrency", o.concurrency, kGpt2Concurrency);
    preset("--drain-timeout", o.drain_timeout_s, kGpt2DrainTimeout);
    if (app.count("--l1-blocks") == 0) preset("--l1-bytes", o.l1_bytes, std::uint64_t{256} << 20);
    if (app.count("--l2-blocks") == 0) preset("--l2-bytes", o.l2_bytes, std::uint64_t{1} << 30);
    if (app.count("--l3-blocks") == 0) preset("--l3-bytes", o.l3_bytes, std::uint64_t{8} << 30);
  }
  if (o.fleet > 0 && app.count("--workload") == 0) o.workload = "e";
  if (!parse_kinds(o.workload)) {
    std::fprintf(stderr, "soak: --workload takes letters a..f\n");
    return 2;
  }
  if (o.warmup_s < 0) o.warmup_s = std::max(5.0, 0.2 * o.duration_s);
  if (o.kill_at_s > 0 && o.kill_at_s + o.kill_for_s + 2 > o.duration_s) {
    std::fprintf(stderr,
                 "soak: --kill-at + --kill-for must end at least 2 s before --duration ends\n");
    return 2;
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  const kvtier::ModelConfig gpt2 = kvtier::ModelConfig::gpt2_124m();
  const fs::path gpt2_dir = fs::path(o.out) / "gpt2-124m-random";
  const std::size_t block = o.gpt2_124m ? kvtier::KvLayout::of(gpt2, o.page_size).block_bytes()
                                        : block_bytes(o.model, o.page_size);
  auto to_blocks = [block](std::uint64_t bytes, int& blocks) {
    if (bytes > 0) blocks = static_cast<int>(std::min<std::uint64_t>(bytes / block, 1 << 30));
  };
  to_blocks(o.l1_bytes, o.l1_blocks);
  to_blocks(o.l2_bytes, o.l2_blocks);
  to_blocks(o.l3_bytes, o.l3_blocks);
  if (o.l1_blocks < 16) {
    std::fprintf(stderr, "soak: L1 holds %d blocks of %zu bytes; it needs 16\n", o.l1_blocks,
                 block);
    return 2;
  }
  {  // Room for the L3 slabs (one at a time, or one per daemon of a fleet) and the model.
    const std::uint64_t need =
        static_cast<std::uint64_t>(o.l3_blocks) * block * std::max(1, o.fleet) +
        (o.gpt2_124m ? std::uint64_t{512} << 20 : 0) + (std::uint64_t{1} << 30);
    const fs::space_info space = fs::space(o.out, ec);
    if (!ec && space.available < need) {
      std::fprintf(stderr, "soak: %s has %s free; the L3 slabs%s and a 1 GiB margin need %s\n",
                   o.out.c_str(), kvtier::util::bytes_text(space.available).c_str(),
                   o.gpt2_124m ? ", the model" : "", kvtier::util::bytes_text(need).c_str());
      return 2;
    }
  }
  RemoveOnExit generated;  // the --gpt2-124m model, after every daemon has gone
  if (o.gpt2_124m) {
    generated.paths.push_back(gpt2_dir);
    if (!o.quiet) std::fprintf(stderr, "soak: writing %s...\n", gpt2_dir.c_str());
    auto written = kvtier::bench::write_random_model(
        gpt2_dir, gpt2, o.seed, fs::path(KVTIER_SOURCE_DIR) / "models" / "gpt2-bpe");
    if (!written) {
      std::fprintf(stderr, "soak: %s\n", written.error().c_str());
      return 2;
    }
    o.model = gpt2_dir.string();
  }
  const auto flags = daemon_flags(o.kvtierd);
  if (flags.empty()) {
    std::fprintf(stderr, "soak: cannot run %s --help\n", o.kvtierd.c_str());
    return 2;
  }

  if (o.fleet > 0) return run_fleet(o, flags);
  if (o.compare) {
    const std::vector<std::pair<std::string, TierSetup>> setups = {
        {"l1", {"L1 recompute", false, false, "recompute", ""}},
        {"l1l2", {"L1+L2", true, false, "recompute", ""}},
        {"l1l2l3", {"L1+L2+L3 swap", true, true, "swap", ""}},
    };
    std::vector<std::pair<std::string, Summary>> rows;
    bool ok = true;
    for (const auto& [tag, setup] : setups) {
      RunOutput r = run_setup(o, setup, flags, tag, Verify::kNone);
      if (!r.started) return 2;
      ok = ok && r.summary.lost == 0 && r.summary.failed == 0;
      warn_if_outrun(r, o.rate);
      rows.emplace_back(setup.label, r.summary);
    }
    std::printf("workload %s, rate %.2f/s, concurrency %d, %.0f s each, seed %llu; tiers %s\n",
                o.workload.c_str(), o.rate, o.concurrency, o.duration_s,
                static_cast<unsigned long long>(o.seed), tiers_text(o).c_str());
    print_comparison(rows, stdout);
    std::printf("CSVs: %s/{l1,l1l2,l1l2l3}-{requests,stats,config}.csv\n", o.out.c_str());
    std::printf("plot: %s/scripts/plot_soak.sh --compare %s\n", KVTIER_SOURCE_DIR, o.out.c_str());
    return ok ? 0 : 1;
  }

  // --gpt2-124m's files are named apart, for docs/soak/gpt2-gib-*.png beside the others.
  const std::string tag = o.gpt2_124m ? "gpt2-gib" : "soak";
  RunOutput r = run_setup(o, {"soak", true, true, "swap", ""}, flags, tag, Verify::kSoak);
  if (!r.started) return 2;
  std::printf(
      "soak: model %s, workload %s, rate %.2f/s, concurrency %d, %.0f s, seed %llu; tiers %s\n",
      model_name(o.model).c_str(), o.workload.c_str(), o.rate, o.concurrency, o.duration_s,
      static_cast<unsigned long long>(o.seed), tiers_text(o).c_str());
  print_summary(r.summary, stdout);
  std::printf("a lone request of the workload, before the arrivals: TTFT %.0f ms\n",
              r.lone_ttft_ms);
  warn_if_outrun(r, o.rate);
  const bool ok = print_checks(r.checks);
  std::printf("CSVs: %s/%s-{requests,stats,config}.csv\n", o.out.c_str(), tag.c_str());
  std::printf("plot: %s/scripts/plot_soak.sh %s/%s\n", KVTIER_SOURCE_DIR, o.out.c_str(),
              tag.c_str());
  std::printf("soak: %s\n", ok ? "all checks passed" : "FAILED");
  return ok ? 0 : 1;
}

#include "bench/loadgen_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

namespace kvtier::bench {

namespace {

// RequestRecord::hit_tier's values.
const char* hit_name(int hit) { return hit == 0 ? "miss" : kTierNames[hit - 1].name; }

std::string fixed(double v, int digits) {
  if (v < 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"')
      out += "\"\"";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out + "\"";
}

std::string pct(double rate) { return rate < 0 ? "-" : fixed(100.0 * rate, 1) + "%"; }

std::string ms(const Distribution& d, double Distribution::*field) {
  return d.count == 0 ? "-" : fixed(d.*field, 1);
}

}  // namespace

long Summary::prefilled_tokens() const {
  long cached = 0;
  for (long c : cached_tokens) cached += c;
  return prompt_tokens - cached;
}

Distribution distribution(std::vector<double> v) {
  Distribution d;
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return x < 0 || std::isnan(x); }),
          v.end());
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  d.count = static_cast<long>(v.size());
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  // Nearest rank: the smallest value with at least p of the values at or below it.
  auto rank = [&](double p) {
    const auto k = static_cast<std::size_t>(std::ceil(p * v.size()));
    return v[std::clamp<std::size_t>(k, 1, v.size()) - 1];
  };
  d.p50 = rank(0.50);
  d.p99 = rank(0.99);
  d.max = v.back();
  return d;
}

Summary summarize(const LoadResult& r) {
  Summary s;
  s.arrived = static_cast<long>(r.records.size());
  s.lost = r.lost();
  s.failed = r.failed();
  s.elapsed_s = r.elapsed_s;
  std::vector<double> ttft, queue, speed, by_hit[kNumTiers + 1];
  long tokens = 0;
  for (const auto& q : r.records) {
    if (!q.ok()) {
      if (s.first_error.empty() && !q.error.empty()) s.first_error = q.error;
      continue;
    }
    ++s.ok;
    tokens += q.completion_tokens;
    ttft.push_back(q.ttft_ms());
    queue.push_back(q.queue_total_ms());
    speed.push_back(q.tokens_per_s());
    by_hit[q.hit_tier()].push_back(q.ttft_ms());
    s.prompt_tokens += q.prompt_tokens;
    for (int t = 0; t < kNumTiers; ++t) s.cached_tokens[t] += q.cached[t];
  }
  s.ttft = distribution(ttft);
  s.queue = distribution(queue);
  s.decode_tok_s = distribution(speed);
  for (int h = 0; h <= kNumTiers; ++h) s.ttft_by_hit[h] = distribution(by_hit[h]);
  for (int t = 0; t < kNumTiers; ++t)
    s.token_hit_rate[t] =
        s.prompt_tokens > 0 ? static_cast<double>(s.cached_tokens[t]) / s.prompt_tokens : 0;
  if (s.elapsed_s > 0) {
    s.requests_per_s = s.ok / s.elapsed_s;
    s.tokens_per_s = tokens / s.elapsed_s;
  }
  const StatsView before = view_stats(r.stats_before);
  const StatsView after = view_stats(
      r.stats_after.is_null() && !r.samples.empty() ? r.samples.back().stats : r.stats_after);
  s.daemon = stats_delta(before, after);
  s.has_cache_stats = after.has_cache;
  for (const auto& sample : r.samples) s.peak_rss_kb = std::max(s.peak_rss_kb, sample.rss_kb);
  return s;
}

void print_summary(const Summary& s, std::FILE* out) {
  print_comparison({{"result", s}}, out);
  if (!s.first_error.empty()) std::fprintf(out, "first error: %s\n", s.first_error.c_str());
}

void print_comparison(const std::vector<std::pair<std::string, Summary>>& runs, std::FILE* out) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& name, auto&& cell) {
    std::vector<std::string> cells;
    for (const auto& [label, s] : runs) cells.push_back(cell(s));
    rows.emplace_back(name, std::move(cells));
  };
  row("requests ok / arrived",
      [](const Summary& s) { return std::to_string(s.ok) + " / " + std::to_string(s.arrived); });
  row("failed, lost",
      [](const Summary& s) { return std::to_string(s.failed) + ", " + std::to_string(s.lost); });
  row("throughput req/s", [](const Summary& s) { return fixed(s.requests_per_s, 2); });
  row("throughput tok/s", [](const Summary& s) { return fixed(s.tokens_per_s, 1); });
  row("TTFT mean ms", [](const Summary& s) { return ms(s.ttft, &Distribution::mean); });
  row("TTFT p50 ms", [](const Summary& s) { return ms(s.ttft, &Distribution::p50); });
  row("TTFT p99 ms", [](const Summary& s) { return ms(s.ttft, &Distribution::p99); });
  row("queue mean ms", [](const Summary& s) { return ms(s.queue, &Distribution::mean); });
  row("decode tok/s/request p50",
      [](const Summary& s) { return ms(s.decode_tok_s, &Distribution::p50); });
  for (int h = 0; h <= kNumTiers; ++h) {
    const std::string name = std::string("TTFT ") + hit_name(h) + " n mean/p50/p99";
    row(name, [h](const Summary& s) {
      const Distribution& d = s.ttft_by_hit[h];
      if (d.count == 0) return std::string("-");
      return std::to_string(d.count) + " " + fixed(d.mean, 1) + "/" + fixed(d.p50, 1) + "/" +
             fixed(d.p99, 1);
    });
  }
  row("prompt tokens prefilled",
      [](const Summary& s) { return std::to_string(s.prefilled_tokens()); });
  row("recomputed tokens (preempted)",
      [](const Summary& s) { return std::to_string(s.daemon.recomputed_tokens); });
  row("preemptions (swapped)", [](const Summary& s) {
    return std::to_string(s.daemon.preemptions) + " (" + std::to_string(s.daemon.swapped_out) + ")";
  });
  for (int t = 0; t < kNumTiers; ++t) {
    row(std::string(kTierNames[t].label) + " hit, prompt tokens",
        [t](const Summary& s) { return pct(s.token_hit_rate[t]); });
  }
  // The daemon's own counts, beside the rates from the answers above.
  for (int t = 0; t < kNumTiers; ++t) {
    row(std::string(kTierNames[t].label) + " hit blocks (stats)", [t](const Summary& s) {
      return s.has_cache_stats && s.daemon.tier[t].present ? std::to_string(s.daemon.tier[t].hits)
                                                           : std::string("-");
    });
  }
  for (int t = 1; t < 3; ++t) {  // the remote tier is written, not demoted into
    row(std::string("demotions into ") + kTierNames[t].label, [t](const Summary& s) {
      return s.daemon.tier[t].present ? std::to_string(s.daemon.tier[t].demotions)
                                      : std::string("-");
    });
  }
  row("daemon peak RSS MiB",
      [](const Summary& s) { return s.peak_rss_kb < 0 ? "-" : fixed(s.peak_rss_kb / 1024.0, 1); });

  std::size_t name_w = 0;
  for (const auto& [name, cells] : rows) name_w = std::max(name_w, name.size());
  std::vector<std::size_t> width;
  for (std::size_t c = 0; c < runs.size(); ++c) {
    std::size_t w = runs[c].first.size();
    for (const auto& [name, cells] : rows) w = std::max(w, cells[c].size());
    width.push_back(w);
  }
  std::fprintf(out, "%-*s", static_cast<int>(name_w), "");
  for (std::size_t c = 0; c < runs.size(); ++c)
    std::fprintf(out, "  %*s", static_cast<int>(width[c]), runs[c].first.c_str());
  std::fprintf(out, "\n");
  for (const auto& [name, cells] : rows) {
    std::fprintf(out, "%-*s", static_cast<int>(name_w), name.c_str());
    for (std::size_t c = 0; c < cells.size(); ++c)
      std::fprintf(out, "  %*s", static_cast<int>(width[c]), cells[c].c_str());
    std::fprintf(out, "\n");
  }
}

bool write_requests_csv(const std::string& path, const LoadResult& result) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  f << "index,kind,chat,turn,priority,batch,daemon,connection,arrival_s,sent_s,first_token_s,done_"
       "s,"
       "queue_ms,daemon_queue_ms,ttft_ms,daemon_ttft_ms,total_ms,tokens_per_s,prompt_tokens,"
       "completion_tokens,cached_l1,cached_l2,cached_l3,cached_remote,hit_tier,finish_reason,"
       "error\n";
  for (const auto& r : result.records) {
    f << r.index << ',' << r.item.kind << ',' << r.item.chat << ',' << r.item.turn << ','
      << r.item.priority << ',' << (r.item.batch ? 1 : 0) << ',' << r.daemon << ',' << r.connection
      << ',' << fixed(r.arrival_s, 4) << ',' << fixed(r.sent_s, 4) << ','
      << fixed(r.first_token_s, 4) << ',' << fixed(r.done_s, 4) << ','
      << fixed(r.queue_total_ms(), 3) << ',' << fixed(r.queue_ms, 3) << ',' << fixed(r.ttft_ms(), 3)
      << ',' << fixed(r.daemon_ttft_ms, 3) << ',' << fixed(r.total_ms, 3) << ','
      << fixed(r.tokens_per_s(), 1) << ',' << r.prompt_tokens << ',' << r.completion_tokens;
    for (int c : r.cached) f << ',' << c;
    f << ',' << hit_name(r.hit_tier()) << ',' << r.finish_reason << ','
      << csv_quote(r.done_s < 0 ? "lost: no answer before the drain timeout" : r.error) << '\n';
  }
  return static_cast<bool>(f);
}

bool write_stats_csv(const std::string& path, const LoadResult& result) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  f << "t_s,waiting,running,pending,blocks_used,blocks_free,preemptions,recomputed_tokens,"
       "swapped_out,requests_completed,tokens_generated,tokens_per_s,completed_per_s";
  for (const TierNames& tier : kTierNames) {
    const char* t = tier.name;
    f << ',' << t << "_used," << t << "_capacity," << t << "_hits," << t << "_demotions," << t
      << "_promotions," << t << "_dropped," << t << "_hit_rate";
  }
  f << ",missed_blocks,cache_nodes,rss_kb\n";
  StatsView prev = view_stats(result.stats_before);
  double prev_t = 0;
  for (const auto& sample : result.samples) {
    const StatsView v = view_stats(sample.stats);
    const StatsView d = stats_delta(prev, v);  // this second's share, for the rates
    const double dt = std::max(1e-3, sample.t_s - prev_t);
    f << fixed(sample.t_s, 3) << ',' << v.waiting << ',' << v.running << ',' << v.pending << ','
      << v.blocks_used << ',' << v.blocks_free << ',' << v.preemptions << ',' << v.recomputed_tokens
      << ',' << v.swapped_out << ',' << v.completed << ',' << v.tokens_generated << ','
      << fixed(d.tokens_generated / dt, 1) << ',' << fixed(d.completed / dt, 2);
    for (int t = 0; t < kNumTiers; ++t) {
      const TierFigures& x = v.tier[t];
      f << ',' << x.used << ',' << x.capacity << ',' << x.hits << ',' << x.demotions << ','
        << x.promotions << ',' << x.dropped << ',' << fixed(d.hit_rate(t), 4);
    }
    f << ',' << v.missed_blocks << ',' << v.cache_nodes << ',' << sample.rss_kb << '\n';
    prev = v;
    prev_t = sample.t_s;
  }
  return static_cast<bool>(f);
}

bool write_config_csv(const std::string& path, const LoadOptions& o, const LoadResult& result,
                      const Settings& extra) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  char rate[32];
  std::snprintf(rate, sizeof rate, "%g", o.rate);
  Settings settings = extra;
  settings.insert(settings.end(), {{"workload", o.kinds},
                                   {"api", o.api},
                                   {"rate", rate},
                                   {"concurrency", std::to_string(o.concurrency)},
                                   {"daemons", std::to_string(o.sockets.size())},
                                   {"duration_s", fixed(o.duration_s, 0)},
                                   {"seed", std::to_string(o.seed)}});
  PerTier<long> capacity;
  for (const auto& sample : result.samples) {
    const StatsView v = view_stats(sample.stats);
    for (int t = 0; t < kNumTiers; ++t) capacity[t] = std::max(capacity[t], v.tier[t].capacity);
  }
  for (int t = 0; t < kNumTiers; ++t)
    if (capacity[t] > 0)
      settings.emplace_back(std::string(kTierNames[t].name) + "_blocks",
                            std::to_string(capacity[t]));
  f << "key,value\n";
  for (auto [key, value] : settings) {
    std::replace_if(
        value.begin(), value.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
    f << key << ',' << value << '\n';
  }
  return static_cast<bool>(f);
}

}  // namespace kvtier::bench

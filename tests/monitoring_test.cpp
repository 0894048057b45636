// The monitoring files of daemon/monitoring/ (docs/monitoring.md) held to
// the daemon they watch: every metric that a PromQL expression of the
// Grafana dashboard or of the rules names must be in a real kvtierd's
// /metrics (in the dashboard, a counter or histogram taken over a range:
// rate, increase); the scrape config and rules pass promtool; every
// expression parses; the alerts fire on what they are for and not on a tier
// that is off; and a real Prometheus, run from the shipped config against a
// daemon with an API key, scrapes it and answers every expression of the
// dashboard.
//
// The metric names come from a small extractor (metric_uses): string
// literals blanked, label matchers, ranges and the label lists of
// by/without/on/ignoring/group_left/group_right skipped, a name followed by
// "(" a function (which must be one PromQL knows), keywords dropped; what
// is left is a metric name. A histogram's series are its _bucket, _sum and
// _count, so a name must be a sample name of the scrape as it is: a bare
// histogram family name is no series at all.
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_test_util.h"
#include "redis_server.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kMonitoring = fs::path(KVTIER_SOURCE_DIR) / "daemon/monitoring";

// Why a test needing `program` is skipped here, or "".
std::string missing(const char* program) {
  return test_util::on_path(program)
             ? ""
             : std::string(program) +
                   " is not installed (scripts/install-deps.sh installs it): not checked";
}

// ---- PromQL: the metrics an expression names --------------------------------------------------

// A set of the words of `text`.
std::set<std::string, std::less<>> words(const std::string& text) {
  std::istringstream in(text);
  return {std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
}

// PromQL's functions and aggregation operators: a name followed by "(".
const auto kFunctions = words(
    "abs absent absent_over_time acos asin atan avg avg_over_time bottomk ceil changes clamp "
    "clamp_max clamp_min count count_over_time count_values day_of_month day_of_week "
    "day_of_year days_in_month delta deriv end exp floor group histogram_quantile holt_winters "
    "hour idelta increase irate label_join label_replace last_over_time ln log10 log2 max "
    "max_over_time min min_over_time minute month predict_linear present_over_time quantile "
    "quantile_over_time rate resets round scalar sgn sort sort_desc sqrt start stddev "
    "stddev_over_time stdvar stdvar_over_time sum sum_over_time time timestamp topk vector year");
// Followed by a parenthesised list of label names, skipped with it.
const auto kLabelListKeywords = words("by without on ignoring group_left group_right");
// Neither metrics nor functions (case-insensitive, as in PromQL).
const auto kKeywords = words("and or unless bool offset inf nan atan2");

struct MetricUse {
  std::string name;
  bool ranged = false;  // a range vector: name{...}[...]
  bool operator==(const MetricUse&) const = default;
};
void PrintTo(const MetricUse& m, std::ostream* os) { *os << m.name << (m.ranged ? "[range]" : ""); }

struct Extracted {
  std::vector<MetricUse> metrics;
  std::vector<std::string> unknown_functions;  // names called that PromQL has no function for
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool name_char(char c) { return name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

Extracted metric_uses(std::string_view expr) {
  std::string s(expr);
  const std::size_t n = s.size();
  // String literals (label values, label_replace's arguments) and comments
  // are blanked: nothing in them is a name.
  for (std::size_t i = 0; i < n; ++i) {
    const char q = s[i];
    if (q == '#') {
      while (i < n && s[i] != '\n') s[i++] = ' ';
    } else if (q == '"' || q == '\'' || q == '`') {
      std::size_t j = i + 1;
      while (j < n && s[j] != q) j += (s[j] == '\\' && q != '`') ? 2 : 1;
      for (std::size_t k = i; k <= j && k < n; ++k) s[k] = ' ';
      i = j;
    }
  }
  const auto skip_space = [&](std::size_t k) {
    while (k < n && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
    return k;
  };
  const auto past = [&](std::size_t k, char close) {  // s[k] opens; after its `close`
    const std::size_t end = s.find(close, k);
    return end == std::string::npos ? n : end + 1;
  };
  Extracted out;
  std::size_t i = 0;
  while (i < n) {
    const char c = s[i];
    if (c == '{') {
      i = past(i, '}');  // the matchers of a selector without a name
    } else if (c == '[') {
      i = past(i, ']');  // a range or subquery: durations
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < n && (name_char(s[i]) || s[i] == '.')) ++i;  // 0.9, 1e3, 5m, 0x1f
    } else if (c == '$') {  // a Grafana variable: $name or ${name}
      ++i;
      if (i < n && s[i] == '{')
        i = past(i, '}');
      else
        while (i < n && name_char(s[i])) ++i;
    } else if (name_start(c)) {
      std::size_t j = i;
      while (j < n && name_char(s[j])) ++j;
      const std::string word = s.substr(i, j - i);
      std::size_t k = skip_space(j);
      i = j;
      std::size_t next_end = k;  // the word after this one, if any: "sum by (le) (...)"
      while (next_end < n && name_char(s[next_end])) ++next_end;
      const std::string next = lower(s.substr(k, next_end - k));
      if (kLabelListKeywords.contains(lower(word))) {
        if (k < n && s[k] == '(') i = past(k, ')');
      } else if ((k < n && s[k] == '(') || next == "by" || next == "without") {
        if (!kFunctions.contains(word)) out.unknown_functions.push_back(word);
      } else if (!kKeywords.contains(lower(word))) {
        if (k < n && s[k] == '{') k = skip_space(past(k, '}'));
        out.metrics.push_back({word, k < n && s[k] == '['});
      }
    } else {
      ++i;
    }
  }
  return out;
}

std::vector<std::string> names(const Extracted& e) {
  std::vector<std::string> out;
  for (const MetricUse& m : e.metrics) out.push_back(m.name);
  return out;
}

TEST(MonitoringPromql, TheExtractorFindsMetricsAndNothingElse) {
  const Extracted quantile = metric_uses(
      R"(histogram_quantile(0.9, sum by (le) (rate(kvtier_x_seconds_bucket{instance=~"$instance"}[$__rate_interval]))))");
  EXPECT_EQ(quantile.metrics, (std::vector<MetricUse>{{"kvtier_x_seconds_bucket", true}}));
  EXPECT_TRUE(quantile.unknown_functions.empty());

  // Label lists, matchers and their values, keywords and numbers are no metrics.
  const Extracted ratio = metric_uses(
      "sum by (tier) (rate(a_total[5m])) / ignoring (tier) group_left () "
      "(sum without (le, code) (rate(b_total{tier=\"rate(c_total)\"}[5m] offset 1h)) + 1e3)");
  EXPECT_EQ(ratio.metrics, (std::vector<MetricUse>{{"a_total", true}, {"b_total", true}}));
  EXPECT_EQ(metric_uses("a_bytes / (b_bytes > 0) AND on (job) c == bool 1").metrics,
            (std::vector<MetricUse>{{"a_bytes", false}, {"b_bytes", false}, {"c", false}}));
  EXPECT_EQ(names(metric_uses("sum(a_total) by (tier) / count WITHOUT (le) (b) > bool 0")),
            (std::vector<std::string>{"a_total", "b"}));
  EXPECT_EQ(names(metric_uses("up{job='kvtier'} == 0 or vector(0)")),
            std::vector<std::string>{"up"});
  EXPECT_EQ(names(metric_uses("max_over_time(kvtier:ttft:p90 [1h:5m]) unless inf")),
            std::vector<std::string>{"kvtier:ttft:p90"});
  EXPECT_TRUE(metric_uses("sum(rate(x_total[${__rate_interval}]))").metrics.front().ranged);
  // A name called that is no PromQL function is reported, not dropped.
  const Extracted typo = metric_uses("rat(x_total[5m])");
  EXPECT_EQ(typo.unknown_functions, std::vector<std::string>{"rat"});
  EXPECT_EQ(names(typo), std::vector<std::string>{"x_total"});
}

// ---- the files ---------------------------------------------------------------------------------

struct Query {
  std::string where;  // for messages: the panel's title, the rule's line
  std::string expr;
};

void collect_panels(const json& panels, std::vector<json>& out) {
  for (const json& p : panels) {
    out.push_back(p);
    if (p.contains("panels")) collect_panels(p["panels"], out);  // a collapsed row's
  }
}

json dashboard() {
  return json::parse(test_util::read_file(kMonitoring / "kvtier-grafana.json"), nullptr, false);
}

// Every PromQL expression of the dashboard: its panels' targets, and its
// template variables' label_values(EXPR, label) (Grafana's, not PromQL's).
std::vector<Query> dashboard_queries(const json& d) {
  std::vector<Query> out;
  std::vector<json> panels;
  collect_panels(d.value("panels", json::array()), panels);
  for (const json& p : panels)
    for (const json& t : p.value("targets", json::array()))
      out.push_back({"panel \"" + p.value("title", "") + "\"", t.value("expr", "")});
  for (const json& v : d.value("templating", json::object()).value("list", json::array())) {
    if (v.value("type", "") != "query" || !v.contains("query")) continue;
    const json& query = v["query"];
    const std::string q = query.is_object()   ? query.value("query", "")
                          : query.is_string() ? query.get<std::string>()
                                              : "";
    const std::string where = "variable $" + v.value("name", "");
    const std::string prefix = "label_values(";
    const std::size_t comma = q.rfind(',');
    if (q.rfind(prefix, 0) == 0 && comma != std::string::npos)
      out.push_back({where, q.substr(prefix.size(), comma - prefix.size())});
    else
      out.push_back({where, q});
  }
  return out;
}

// The rules' expressions: one `expr:` line each (kvtier-rules.yml keeps
// them on one line).
std::vector<Query> rule_queries() {
  std::vector<Query> out;
  std::istringstream in(test_util::read_file(kMonitoring / "kvtier-rules.yml"));
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::size_t at = line.find_first_not_of(' ');
    if (at == std::string::npos || line.compare(at, 5, "expr:") != 0) continue;
    std::string expr = line.substr(line.find_first_not_of(' ', at + 5));
    if (expr == "|" || expr == ">" || expr.starts_with("|-") || expr.starts_with(">-"))
      ADD_FAILURE() << "kvtier-rules.yml:" << number << ": keep each expr on one line";
    out.push_back({"kvtier-rules.yml:" + std::to_string(number), expr});
  }
  return out;
}

// An expression as Grafana sends it: its variables replaced. Empty if it
// uses one this list does not know.
std::string as_sent(std::string expr, const std::string& range) {
  for (const auto& [var, value] :
       std::vector<std::pair<std::string, std::string>>{{"$__rate_interval", range},
                                                        {"$__interval", range},
                                                        {"$__range", range},
                                                        {"$instance", ".*"}})
    for (std::size_t at; (at = expr.find(var)) != std::string::npos;)
      expr.replace(at, var.size(), value);
  return expr.find('$') == std::string::npos ? expr : "";
}

TEST(MonitoringDashboard, IsAnImportableDashboardWithAPanelForEachTopic) {
  const json d = dashboard();
  ASSERT_FALSE(d.is_discarded()) << "kvtier-grafana.json is not JSON";
  // Importable: the datasource is asked for at import (__inputs), and every
  // panel and query uses that input.
  ASSERT_TRUE(d.contains("__inputs") && d["__inputs"].is_array() && !d["__inputs"].empty());
  EXPECT_EQ(d["__inputs"][0].value("type", ""), "datasource");
  EXPECT_EQ(d["__inputs"][0].value("pluginId", ""), "prometheus");
  const std::string ds = "${" + d["__inputs"][0].value("name", "") + "}";
  EXPECT_FALSE(d.value("uid", "").empty());
  EXPECT_FALSE(d.value("title", "").empty());
  EXPECT_TRUE(d.value("id", json(0)).is_null()) << "an exported dashboard has \"id\": null";

  std::vector<json> panels;
  collect_panels(d.value("panels", json::array()), panels);
  ASSERT_GE(panels.size(), 10u);
  std::set<int> ids;
  int queries = 0;
  for (const json& p : panels) {
    const std::string title = p.value("title", "");
    EXPECT_FALSE(title.empty());
    EXPECT_TRUE(ids.insert(p.value("id", -1)).second) << title << ": a duplicate panel id";
    ASSERT_TRUE(p.contains("gridPos")) << title;
    EXPECT_LE(p["gridPos"].value("x", 0) + p["gridPos"].value("w", 0), 24) << title;
    if (p.value("type", "") == "row") continue;
    EXPECT_EQ(p["datasource"].value("uid", ""), ds) << title;
    ASSERT_FALSE(p.value("targets", json::array()).empty()) << title << " has no query";
    for (const json& t : p["targets"]) {
      EXPECT_EQ(t["datasource"].value("uid", ""), ds) << title;
      EXPECT_FALSE(as_sent(t.value("expr", ""), "5m").empty())
          << title << ": an unknown variable in " << t.value("expr", "");
      ++queries;
    }
  }
  EXPECT_GE(queries, 20);

  // The topics: TTFT quantiles and histogram, tokens/s, running/waiting,
  // hit rate and occupancy by tier, preemptions, remote health, errors.
  std::set<std::string> named;
  std::string all;
  for (const Query& q : dashboard_queries(d)) {
    for (const std::string& m : names(metric_uses(q.expr))) named.insert(m);
    all += q.expr + "\n";
  }
  for (const char* m :
       {"kvtier_time_to_first_token_seconds_bucket", "kvtier_generation_tokens_total",
        "kvtier_requests_running", "kvtier_requests_waiting", "kvtier_tier_hits_total",
        "kvtier_cache_missed_blocks_total", "kvtier_tier_used_bytes", "kvtier_tier_capacity_bytes",
        "kvtier_preemptions_total", "kvtier_remote_node_up", "kvtier_tier_io_errors_total"})
    EXPECT_TRUE(named.contains(m)) << "no panel shows " << m;
  EXPECT_TRUE(test_util::contains(all,
                                  "histogram_quantile(0.99, sum by (le) (rate("
                                  "kvtier_time_to_first_token_seconds_bucket"));
  bool heatmap = false;
  for (const json& p : panels)
    for (const json& t : p.value("targets", json::array()))
      heatmap |= p.value("type", "") == "heatmap" && t.value("format", "") == "heatmap" &&
                 test_util::contains(t.value("expr", ""), "time_to_first_token_seconds_bucket");
  EXPECT_TRUE(heatmap) << "no TTFT heatmap";
}

// ---- promtool ----------------------------------------------------------------------------------

const std::string kKeyLine = "/etc/prometheus/kvtier-api-key";

// prometheus.yml with its authorization lines uncommented, the key read
// from `key`. Empty if the lines are not there as docs/monitoring.md says.
std::string with_api_key(std::string config, const fs::path& key) {
  const std::string commented =
      "    # authorization:\n"
      "    #   type: Bearer\n"
      "    #   credentials_file: " +
      kKeyLine + "\n";
  const std::size_t at = config.find(commented);
  if (at == std::string::npos) return "";
  config.replace(
      at, commented.size(),
      "    authorization:\n      type: Bearer\n      credentials_file: " + key.string() + "\n");
  return config;
}

// `text` with the first `from` replaced by `to`; empty if there is none.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  if (at == std::string::npos) return "";
  return text.replace(at, from.size(), to);
}

TEST(MonitoringPromtool, TheScrapeConfigAndTheRulesPassPromtool) {
  if (const std::string why = missing("promtool"); !why.empty()) GTEST_SKIP() << why;
  const std::string config = (kMonitoring / "prometheus.yml").string();
  const auto as_shipped = test_util::run_command("promtool check config '" + config + "' 2>&1");
  EXPECT_EQ(as_shipped.status, 0) << as_shipped.output;
  EXPECT_TRUE(test_util::contains(as_shipped.output, "SUCCESS: 1 rule files found"));
  const auto rules = test_util::run_command("promtool check rules '" +
                                            (kMonitoring / "kvtier-rules.yml").string() + "' 2>&1");
  EXPECT_EQ(rules.status, 0) << rules.output;
  EXPECT_TRUE(test_util::contains(
      rules.output, "SUCCESS: " + std::to_string(rule_queries().size()) + " rules found"));

  // With the key lines uncommented, as docs/monitoring.md says to.
  test_util::TempDir dir;
  const fs::path key = dir.write("key", "0123456789abcdef0123\n");
  fs::copy_file(kMonitoring / "kvtier-rules.yml", dir.path() / "kvtier-rules.yml");
  const std::string keyed = with_api_key(test_util::read_file(config), key);
  ASSERT_FALSE(keyed.empty()) << "prometheus.yml has no commented authorization block";
  dir.write("prometheus.yml", keyed);
  const auto with_key = test_util::run_command("promtool check config '" +
                                               (dir.path() / "prometheus.yml").string() + "' 2>&1");
  EXPECT_EQ(with_key.status, 0) << with_key.output << keyed;
}

TEST(MonitoringPromtool, EveryExpressionParses) {
  if (const std::string why = missing("promtool"); !why.empty()) GTEST_SKIP() << why;
  // Each expression as a recording rule: promtool parses and type-checks it.
  std::string rules = "groups:\n  - name: every-expression\n    rules:\n";
  std::vector<Query> queries = dashboard_queries(dashboard());
  const std::vector<Query> from_rules = rule_queries();
  queries.insert(queries.end(), from_rules.begin(), from_rules.end());
  ASSERT_GE(queries.size(), 25u);
  int n = 0;
  for (const Query& q : queries) {
    std::string expr = as_sent(q.expr, "5m");
    ASSERT_FALSE(expr.empty()) << q.where << ": an unknown variable in " << q.expr;
    for (std::size_t at = 0; (at = expr.find('\'', at)) != std::string::npos; at += 2)
      expr.insert(at, "'");  // YAML's single quotes
    rules += "      - record: kvtier_test:expr_" + std::to_string(++n) + "\n        expr: '" +
             expr + "'\n";
  }
  test_util::TempDir dir;
  const fs::path file = dir.write("every.yml", rules);
  const auto checked = test_util::run_command("promtool check rules '" + file.string() + "' 2>&1");
  EXPECT_EQ(checked.status, 0) << checked.output << rules;
  EXPECT_TRUE(test_util::contains(checked.output, "SUCCESS: " + std::to_string(n) + " rules"));
}

// kvtier-rules.yml without its annotations (promtool test rules compares
// them too, and their wording is not what is tested here).
std::string rules_without_annotations() {
  std::istringstream in(test_util::read_file(kMonitoring / "kvtier-rules.yml"));
  std::string out, line;
  std::size_t skipping = std::string::npos;  // the indent of the annotations: being skipped
  while (std::getline(in, line)) {
    const std::size_t indent = line.find_first_not_of(' ');
    if (skipping != std::string::npos && (indent == std::string::npos || indent > skipping))
      continue;
    skipping = std::string::npos;
    if (indent != std::string::npos && line.compare(indent, 12, "annotations:") == 0) {
      skipping = indent;
      continue;
    }
    out += line + "\n";
  }
  return out;
}

TEST(MonitoringPromtool, AlertsFireOnFailuresAndNotOnATierThatIsOff) {
  if (const std::string why = missing("promtool"); !why.empty()) GTEST_SKIP() << why;
  test_util::TempDir dir;
  const std::string rules = rules_without_annotations();
  ASSERT_EQ(rules.find("annotations:"), std::string::npos);
  ASSERT_NE(rules.find("alert: KvtierTierUnavailable"), std::string::npos);
  dir.write("rules.yml", rules);
  // Series of daemon "a" (L3 off, so unavailable without errors; a remote
  // tier whose one node fails at minute 2, its breaker opening 5 times and
  // I/O errors from then on; one checksum failure at minute 1, long over by
  // minute 20) and of daemon "b" (stops answering at minute 2).
  std::string tests = R"(rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{@B}'
        values: '1 1 0x20'
      - series: 'kvtier_remote_node_up{@A,address="10.0.0.7:6379"}'
        values: '1 1 0x20'
      - series: 'kvtier_remote_node_breaker_opened_total{@A,address="10.0.0.7:6379"}'
        values: '0 0 1 2 3 4 5 5x20'
      - series: 'kvtier_tier_available{@A,tier="l3"}'
        values: '0x22'
      - series: 'kvtier_tier_io_errors_total{@A,tier="l3"}'
        values: '0x22'
      - series: 'kvtier_tier_available{@A,tier="remote"}'
        values: '1 1 0x20'
      - series: 'kvtier_tier_io_errors_total{@A,tier="remote"}'
        values: '0 0 1+1x20'
      - series: 'kvtier_tier_checksum_failures_total{@A,tier="remote"}'
        values: '0 1x21'
    alert_rule_test:
      - eval_time: 2m
        alertname: KvtierDown
      - eval_time: 4m
        alertname: KvtierDown
        exp_alerts:
          - exp_labels: {severity: critical, job: kvtier, instance: "b:8000"}
      - eval_time: 3m
        alertname: KvtierRemoteNodeDown
      - eval_time: 5m
        alertname: KvtierRemoteNodeDown
        exp_alerts:
          - exp_labels: {severity: warning, job: kvtier, instance: "a:8000", address: "10.0.0.7:6379"}
      - eval_time: 7m
        alertname: KvtierRemoteNodeFlapping
        exp_alerts:
          - exp_labels: {severity: warning, job: kvtier, instance: "a:8000", address: "10.0.0.7:6379"}
      - eval_time: 10m
        alertname: KvtierTierUnavailable
        exp_alerts:
          - exp_labels: {severity: warning, job: kvtier, instance: "a:8000", tier: remote}
      - eval_time: 10m
        alertname: KvtierTierIoErrors
        exp_alerts:
          - exp_labels: {severity: warning, job: kvtier, instance: "a:8000", tier: remote}
      - eval_time: 5m
        alertname: KvtierChecksumFailures
        exp_alerts:
          - exp_labels: {severity: critical, job: kvtier, instance: "a:8000", tier: remote}
      - eval_time: 20m
        alertname: KvtierChecksumFailures
)";
  for (const auto& [mark, labels] : {std::pair("@A", "job=\"kvtier\",instance=\"a:8000\""),
                                     std::pair("@B", "job=\"kvtier\",instance=\"b:8000\"")})
    for (std::size_t at; (at = tests.find(mark)) != std::string::npos;)
      tests.replace(at, 2, labels);
  const fs::path file = dir.write("test.yml", tests);
  const auto run = test_util::run_command("cd '" + dir.path().string() +
                                          "' && promtool test rules test.yml 2>&1");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_TRUE(test_util::contains(run.output, "SUCCESS")) << run.output;
}

// ---- a real daemon -----------------------------------------------------------------------------

struct Exposition {
  std::set<std::string> samples;             // sample names, as written
  std::map<std::string, std::string> types;  // family: counter, gauge, histogram
};

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string family, type;
      words >> family >> type;
      e.types[family] = type;
    } else if (!line.empty() && line[0] != '#') {
      e.samples.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
  return e;
}

// The family a sample name belongs to ("" if none is declared).
std::string family_of(const Exposition& e, const std::string& sample) {
  if (e.types.contains(sample)) return sample;
  for (const std::string suffix : {"_bucket", "_sum", "_count"})
    if (sample.ends_with(suffix)) {
      const std::string base = sample.substr(0, sample.size() - suffix.size());
      if (auto it = e.types.find(base); it != e.types.end() && it->second == "histogram")
        return base;
    }
  return "";
}

// The series Prometheus itself adds to every target's.
const std::set<std::string> kScrapeSeries = {"up"};

// What is wrong with the metrics `q` names, measured against a scrape:
// names not in it and, with `over_ranges`, counters and histograms not
// taken over a range (a panel of a total since the daemon's start says
// little; a rule may well ask whether a counter is above 0).
// `sampleless`: families declared without samples whose names still pass
// (the remote tier's, on a machine without Redis).
std::vector<std::string> problems(const Query& q, const Exposition& scrape,
                                  const std::set<std::string>& sampleless, bool over_ranges) {
  std::vector<std::string> out;
  const Extracted e = metric_uses(q.expr);
  if (e.metrics.empty()) out.push_back(q.where + ": names no metric: " + q.expr);
  for (const std::string& f : e.unknown_functions)
    out.push_back(q.where + ": " + f + "( is no PromQL function");
  for (const MetricUse& m : e.metrics) {
    if (kScrapeSeries.contains(m.name)) continue;
    const std::string family = family_of(scrape, m.name);
    if (!scrape.samples.contains(m.name) && !sampleless.contains(family)) {
      out.push_back(q.where + ": " + m.name + " is not in /metrics" +
                    (scrape.types.contains(m.name + "_total") ? " (a counter's name ends in _total)"
                     : scrape.types.contains(m.name) ? " (a histogram: _bucket, _sum or _count)"
                                                     : ""));
      continue;
    }
    const auto type_of = scrape.types.find(family);
    const std::string type = type_of == scrape.types.end() ? "untyped" : type_of->second;
    if (over_ranges && (type == "counter" || type == "histogram") && !m.ranged)
      out.push_back(q.where + ": the " + type + " " + m.name +
                    " is used as it is, not over a range (rate, increase)");
  }
  return out;
}

// HTTP on loopback with curl: the status (0: no answer) and the body.
struct Answer {
  int status = 0;
  std::string body;
};

Answer http(const std::string& url, const std::string& extra = "") {
  const auto run = test_util::run_command("curl -s --max-time 60 -w '\\n%{http_code}' " + extra +
                                          " '" + url + "' 2>/dev/null");
  Answer a;
  const std::size_t nl = run.output.rfind('\n');
  if (nl == std::string::npos) return a;
  a.status = std::atoi(run.output.c_str() + nl + 1);
  a.body = run.output.substr(0, nl);
  return a;
}

// A daemon with every tier (L3 in a temp dir, the remote tier on a real
// Redis where there is one) and the HTTP API on a free loopback port, that
// has answered two completions (the second from the prefix cache).
class MonitoringDaemon : public ::testing::Test {
 protected:
  void start(std::vector<std::string> args = {}, const std::string& bearer = "") {
    if (!test_util::RedisServer::missing()) {
      redis_ = std::make_unique<test_util::RedisServer>();
      ASSERT_TRUE(redis_->ready()) << redis_->log();
      args.insert(args.end(), {"--remote", redis_->socket_path()});
    }
    base_ = "http://127.0.0.1:" + std::to_string(port_);
    args.insert(args.end(), {"--http-listen", "127.0.0.1:" + std::to_string(port_), "--l3-path",
                             (dir_.path() / "l3").string(), "--l3-bytes", "64MiB"});
    daemon_ = std::make_unique<Daemon>(args);
    ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log();
    auth_ = bearer.empty() ? "" : "-H 'Authorization: Bearer " + bearer + "'";
    const fs::path body = dir_.write(
        "body.json", R"({"prompt": "Q: What is the difference between a cat and a lion? A:",
                         "max_tokens": 4})");
    for (int i = 0; i < 2; ++i) {
      const Answer a = http(
          base_ + "/v1/completions",
          auth_ + " -H 'Content-Type: application/json' --data-binary @'" + body.string() + "'");
      ASSERT_EQ(a.status, 200) << a.body << daemon_->log();
    }
  }
  // The remote tier's families, which have samples only with a Redis.
  std::set<std::string> sampleless() const {
    if (redis_) return {};
    return {"kvtier_remote_node_up", "kvtier_remote_node_breaker_opened_total"};
  }

  test_util::TempDir dir_;
  int port_ = test_util::free_tcp_port();
  std::string base_, auth_;
  std::unique_ptr<test_util::RedisServer> redis_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(MonitoringDaemon, EveryMetricTheDashboardAndTheRulesNameIsInMetrics) {
  if (const std::string why = missing("curl"); !why.empty()) GTEST_SKIP() << why;
  ASSERT_NO_FATAL_FAILURE(start());
  if (!redis_)
    std::cout << "redis-server is not installed: the remote tier's families count "
                 "as present when /metrics declares them\n";
  const Answer m = http(base_ + "/metrics");
  ASSERT_EQ(m.status, 200) << m.body;
  const Exposition scrape = parse_exposition(m.body);
  ASSERT_TRUE(scrape.samples.contains("kvtier_time_to_first_token_seconds_bucket")) << m.body;
  EXPECT_TRUE(test_util::contains(m.body, "kvtier_time_to_first_token_seconds_count 2\n"));
  if (redis_) {
    EXPECT_TRUE(scrape.samples.contains("kvtier_remote_node_up")) << m.body;
  }

  const std::vector<Query> panels = dashboard_queries(dashboard());
  const std::vector<Query> rules = rule_queries();
  ASSERT_GE(panels.size(), 20u);
  ASSERT_GE(rules.size(), 5u);
  std::string wrong;
  int checked = 0;
  for (const auto& [queries, over_ranges] : {std::pair(&panels, true), std::pair(&rules, false)})
    for (const Query& q : *queries) {
      for (const std::string& p : problems(q, scrape, sampleless(), over_ranges)) wrong += p + "\n";
      checked += static_cast<int>(metric_uses(q.expr).metrics.size());
    }
  EXPECT_EQ(wrong, "");
  EXPECT_GE(checked, 40);

  // The check itself catches what it is for: a name not scraped, a bare
  // histogram family, a counter without a range.
  const auto count = [&](const std::string& expr, bool over_ranges = true) {
    return problems({"x", expr}, scrape, {}, over_ranges).size();
  };
  EXPECT_EQ(count("rate(kvtier_no_such_total[5m])"), 1u);
  EXPECT_EQ(count("histogram_quantile(0.9, rate(kvtier_time_to_first_token_seconds[5m]))"), 1u);
  EXPECT_EQ(count("sum(kvtier_preemptions_total)"), 1u);
  EXPECT_EQ(count("sum(kvtier_preemptions_total)", false), 0u);
  EXPECT_EQ(count("sum(kvtier_kv_blocks_used) + up"), 0u);
}

// A child process (prometheus), its output in `log`: sent SIGTERM when the
// object goes, and SIGKILL 20 s later. Owns none, the failure reported,
// when it cannot start.
util::ChildProcess start_child(const std::vector<std::string>& args, const fs::path& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  auto child = util::spawn_child(
      args, {.stdout_fd = fd, .stderr_fd = fd, .stop_grace = std::chrono::seconds(20)});
  if (fd >= 0) ::close(fd);
  EXPECT_TRUE(child) << child.error();
  return child ? std::move(*child) : util::ChildProcess();
}

std::string prometheus_binary() {
  const auto run = test_util::run_command("command -v prometheus");
  return run.status == 0 ? run.output.substr(0, run.output.find('\n')) : "";
}

TEST_F(MonitoringDaemon, PrometheusScrapesAKeyedDaemonWithTheShippedConfigAndAnswersEveryQuery) {
  if (const std::string why = missing("curl"); !why.empty()) GTEST_SKIP() << why;
  if (const std::string why = missing("prometheus"); !why.empty()) GTEST_SKIP() << why;
  const std::string key = "0123456789abcdef0123456789abcdef";
  const fs::path daemon_key = dir_.write("api-key", key + "\n");
  fs::permissions(daemon_key, fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_NO_FATAL_FAILURE(start({"--http-api-key-file", daemon_key.string()}, key));
  ASSERT_EQ(http(base_ + "/metrics").status, 401) << "/metrics without the key";

  // The shipped config: the key lines uncommented, this daemon's port, a
  // scrape every second.
  const fs::path prometheus_key = dir_.write("prometheus-key", key + "\n");
  std::string config =
      with_api_key(test_util::read_file(kMonitoring / "prometheus.yml"), prometheus_key);
  config = replaced(config, "targets: [\"127.0.0.1:8000\"]",
                    "targets: [\"127.0.0.1:" + std::to_string(port_) + "\"]");
  config = replaced(config, "scrape_interval: 15s", "scrape_interval: 1s");
  config = replaced(config, "evaluation_interval: 15s", "evaluation_interval: 1s");
  ASSERT_FALSE(config.empty()) << "prometheus.yml no longer reads as this test expects";
  const fs::path config_file = dir_.write("prometheus.yml", config);
  fs::copy_file(kMonitoring / "kvtier-rules.yml", dir_.path() / "kvtier-rules.yml");
  const int web_port = test_util::free_tcp_port();
  const std::string api = "http://127.0.0.1:" + std::to_string(web_port) + "/api/v1/";
  const fs::path log = dir_.path() / "prometheus.log";
  const util::ChildProcess prometheus = start_child(
      {prometheus_binary(), "--config.file=" + config_file.string(),
       "--storage.tsdb.path=" + (dir_.path() / "data").string(),
       "--web.listen-address=127.0.0.1:" + std::to_string(web_port), "--log.level=warn"},
      log);
  ASSERT_GT(prometheus.pid(), 0);
  const auto query = [&](const std::string& expr) {
    const fs::path file = dir_.write("query", expr);
    return json::parse(http(api + "query", "--data-urlencode query@'" + file.string() + "'").body,
                       nullptr, false);
  };

  // Bounded: until a scrape of the job has succeeded.
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  bool up = false;
  while (!up && std::chrono::steady_clock::now() < deadline) {
    json r = query("up{job=\"kvtier\"}");
    up = !r.is_discarded() && r["data"]["result"].size() == 1 &&
         r["data"]["result"][0]["value"][1] == "1";
    if (!up) std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(up) << "no successful scrape; targets: " << http(api + "targets").body
                  << "\nprometheus: " << test_util::read_file(log);

  // Every metric named, through Prometheus: present; every expression
  // answers.
  std::vector<Query> queries = dashboard_queries(dashboard());
  const std::vector<Query> from_rules = rule_queries();
  queries.insert(queries.end(), from_rules.begin(), from_rules.end());
  std::set<std::string> named;
  for (const Query& q : queries)
    for (const std::string& n : names(metric_uses(q.expr))) named.insert(n);
  for (const std::string& n : named) {
    if (sampleless().contains(n)) continue;
    json r = query("count(" + n + "{job=\"kvtier\"})");
    EXPECT_EQ(r.value("status", ""), "success") << n << ": " << r.dump();
    EXPECT_FALSE(r["data"]["result"].empty()) << n << " is not in what Prometheus scraped";
  }
  for (const Query& q : queries) {
    json r = query(as_sent(q.expr, "1m"));
    EXPECT_EQ(r.value("status", ""), "success") << q.where << ": " << q.expr << "\n" << r.dump();
  }
  // The rule file was loaded, with every rule in it.
  json rules = json::parse(http(api + "rules").body, nullptr, false);
  ASSERT_FALSE(rules.is_discarded());
  std::size_t loaded = 0;
  for (const json& g : rules["data"]["groups"]) loaded += g["rules"].size();
  EXPECT_EQ(loaded, from_rules.size()) << rules.dump();
}

}  // namespace
}  // namespace kvtier

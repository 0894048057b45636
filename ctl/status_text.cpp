#include "ctl/status_text.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "ctl/cache_commands.h"
#include "engine/cache/tier.h"

namespace kvtier::ctl {

using nlohmann::json;

namespace {

// The `stats` fields each group shows, in order. A field in no group is
// shown under "other", so none is lost.
struct Group {
  const char* title;
  std::vector<std::string_view> keys;
};
const Group kStatsGroups[] = {
    {"requests",
     {"connections", "pending", "waiting", "prefilling", "running", "swapped", "requests_submitted",
      "requests_completed", "requests_cancelled", "requests_failed"}},
    {"engine",
     {"steps", "tokens_generated", "preemptions", "recomputed_tokens", "swapped_out", "swapped_in",
      "evicted_blocks", "discarded_passes"}},
    {"kv blocks", {"blocks_used", "blocks_free"}},
};
// Shown on the version line, not as counters.
constexpr std::string_view kVersionKeys[] = {"version", "git_revision"};

bool is_version_key(std::string_view key) {
  return std::ranges::find(kVersionKeys, key) != std::end(kVersionKeys);
}

bool in_a_group(std::string_view key) {
  return std::ranges::any_of(
      kStatsGroups, [&](const Group& g) { return std::ranges::find(g.keys, key) != g.keys.end(); });
}

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// "kvtierd 0.3.0 (rev abc)", or "" when the daemon says neither.
std::string version_text(const json& j) {
  std::string out;
  if (auto v = j.find("version"); v != j.end()) out = "kvtierd " + scalar_text(*v);
  if (auto rev = j.find("git_revision"); rev != j.end()) {
    out += (out.empty() ? "kvtierd (rev " : " (rev ") + scalar_text(*rev) + ")";
  }
  return out;
}

struct Row {
  std::string name, value;  // a nested object's row has no value: its fields follow
};
struct Section {
  std::string title;
  std::vector<Row> rows;
  std::string trailer;  // text shown as it is, after the rows
};

// A field as rows: a nested object's fields indented under its name.
void add_field(const std::string& name, const json& value, const std::string& indent,
               std::vector<Row>& rows) {
  if (!value.is_object()) {
    rows.push_back({indent + name, scalar_text(value)});
    return;
  }
  rows.push_back({indent + name, ""});
  for (const auto& [key, v] : value.items()) add_field(key, v, indent + "  ", rows);
}

Section cache_section(const json& cache) {
  Section s{"cache", {}, {}};
  if (!cache.is_object()) {
    s.rows.push_back({"prefix_cache", "off"});
    return s;
  }
  for (const auto& [key, value] : cache.items()) {
    if (key != "tiers" && key != "costs") add_field(key, value, "", s.rows);
  }
  s.trailer =
      tier_table_text(cache.value("tiers", json::object()), cache.value("missed_blocks", -1L)) +
      tier_costs_text(cache.value("costs", json::object()));
  return s;
}

}  // namespace

std::string stats_text(const json& stats) {
  std::vector<Section> sections;
  for (const Group& g : kStatsGroups) {
    Section s{g.title, {}, {}};
    for (std::string_view key : g.keys) {
      if (auto it = stats.find(key); it != stats.end())
        add_field(std::string(key), *it, "", s.rows);
    }
    sections.push_back(std::move(s));
  }
  Section other{"other", {}, {}};
  for (const auto& [key, value] : stats.items()) {
    if (key != "cache" && !is_version_key(key) && !in_a_group(key))
      add_field(key, value, "", other.rows);
  }
  if (!other.rows.empty()) sections.push_back(std::move(other));
  if (stats.contains("cache")) sections.push_back(cache_section(stats["cache"]));

  std::size_t width = 0;
  for (const Section& s : sections)
    for (const Row& r : s.rows) width = std::max(width, r.name.size());
  std::string out;
  if (const std::string version = version_text(stats); !version.empty()) out += version + "\n";
  for (const Section& s : sections) {
    out += "# " + s.title + "\n";
    for (const Row& r : s.rows) {
      out +=
          r.value.empty() ? r.name : r.name + std::string(width + 2 - r.name.size(), ' ') + r.value;
      out += "\n";
    }
    out += s.trailer;
  }
  return out;
}

std::string health_text(const json& health) {
  std::vector<std::string> parts = {scalar_text(health.value("status", json("?")))};
  if (const std::string version = version_text(health); !version.empty()) parts.push_back(version);
  if (auto device = health.find("device"); device != health.end())
    parts.push_back("device " + scalar_text(*device));
  if (auto m = health.find("model"); m != health.end() && m->is_object()) {
    auto n = [&](const char* key) { return scalar_text(m->value(key, json("?"))); };
    const std::string name = m->contains("name") ? n("name") + ": " : "";
    parts.push_back("model " + name + n("n_layer") + " layers, " + n("n_head") + " heads, " +
                    n("n_embd") + " wide, vocab " + n("vocab_size") + ", context " +
                    n("block_size"));
  }
  if (auto r = health.find("router"); r != health.end() && r->is_object()) {
    const std::size_t all = r->value("daemons", json::array()).size();
    parts.push_back("router: " + scalar_text(r->value("usable", json("?"))) + " of " +
                    std::to_string(all) + " daemons usable");
  }
  // Any other plain field as "name value"; `config` is config get's.
  for (const auto& [key, value] : health.items()) {
    if (key == "status" || key == "device" || is_version_key(key) || value.is_structured())
      continue;
    parts.push_back(key + " " + scalar_text(value));
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "  ") + p;
  return out + "\n";
}

std::string fleet_text(const json& fleet) {
  // "l1 12, l2 0, ..." for an object of counts, in its order.
  const auto counts = [](const json& object) {
    std::string out;
    if (!object.is_object()) return out;
    for (const auto& [key, value] : object.items())
      out += (out.empty() ? "" : ", ") + key + " " + scalar_text(value);
    return out;
  };
  std::vector<std::vector<std::string>> rows = {{"daemon", "usable", "pending", "backlog rows",
                                                 "routed", "blocks indexed", "out", "last error"}};
  for (const json& d : fleet.value("daemons", json::array())) {
    if (!d.is_object()) continue;
    rows.push_back(
        {scalar_text(d.value("address", json("?"))), d.value("usable", false) ? "yes" : "no",
         scalar_text(d.value("pending", json("?"))),
         scalar_text(d.value("backlog_rows", json("?"))), scalar_text(d.value("routed", json("?"))),
         d.value("indexed", false) ? counts(d.value("blocks", json())) : "(none)",
         scalar_text(d.value("downs", json("?"))), scalar_text(d.value("last_error", json("")))});
  }
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += "choices: " + counts(fleet.value("choices", json())) + "\n";
  out += "blocks the chosen daemon held: " + counts(fleet.value("routed_blocks", json())) + "\n";
  out +=
      "cached tokens the daemons reported: " + counts(fleet.value("cached_tokens", json())) + "\n";
  return out;
}

std::string cached_tokens_text(const json& result) {
  const json cached = result.value("cached_tokens", json::object());
  std::string text;
  for (const TierNames& t : kTierNames)
    text += std::string(text.empty() ? "" : ", ") + t.name + " " +
            std::to_string(cached.value(t.name, 0));
  return text;
}

}  // namespace kvtier::ctl

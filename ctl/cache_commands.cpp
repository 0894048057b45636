#include "ctl/cache_commands.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "engine/cache/tier.h"

namespace kvtier::ctl {

using nlohmann::json;

namespace {

// The tiers' names in the protocol, fastest first.
constexpr auto kTiers = [] {
  std::array<const char*, kNumTiers> names{};
  for (int t = 0; t < kNumTiers; ++t) names[static_cast<std::size_t>(t)] = kTierNames[t].name;
  return names;
}();

long num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<long>() : 0;
}

double real(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string mib(long bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// "l1 16  l2 0  l3 32  remote 0" from {"l1":16,"l2":0,"l3":32,"remote":0}.
std::string per_tier(const json& j) {
  std::string out;
  for (const char* t : kTiers) {
    if (!out.empty()) out += "  ";
    out += std::string(t) + " " + std::to_string(num(j, t));
  }
  return out;
}

// What a cell of the tier table is made from: its tier's row.
struct TierCell {
  const char* tier;
  const json& row;
  long looked_up;  // every tier's hits plus the misses; 0 when unknown
};
// One column of the tier table. `keep` ranks the columns for a narrow
// screen: the lowest ranks are kept first.
struct Column {
  const char* header;
  int width;  // negative: left-aligned
  int keep;
  std::string (*cell)(const TierCell&);
};

std::string count(const json& row, const char* key) { return std::to_string(num(row, key)); }

std::string decimal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

constexpr Column kColumns[] = {
    {"tier", -6, 0, [](const TierCell& c) { return std::string(c.tier); }},
    {"avail", -5, 1,
     [](const TierCell& c) { return std::string(c.row.value("available", false) ? "yes" : "no"); }},
    {"used/capacity", 15, 2,
     [](const TierCell& c) {
       return count(c.row, "used_blocks") + "/" + count(c.row, "capacity_blocks");
     }},
    {"hits", 8, 3, [](const TierCell& c) { return count(c.row, "hits"); }},
    {"hit%", 6, 4,
     [](const TierCell& c) {
       return c.looked_up > 0 ? decimal(100.0 * num(c.row, "hits") / c.looked_up)
                              : std::string("-");
     }},
    {"demoted", 8, 5, [](const TierCell& c) { return count(c.row, "demotions"); }},
    {"promoted", 8, 6, [](const TierCell& c) { return count(c.row, "promotions"); }},
    {"in MiB", 8, 9, [](const TierCell& c) { return mib(num(c.row, "bytes_in")); }},
    {"out MiB", 8, 10, [](const TierCell& c) { return mib(num(c.row, "bytes_out")); }},
    {"dropped", 7, 7, [](const TierCell& c) { return count(c.row, "dropped"); }},
    {"cksum", 6, 11, [](const TierCell& c) { return count(c.row, "checksum_failures"); }},
    {"io_err", 6, 12, [](const TierCell& c) { return count(c.row, "io_errors"); }},
    {"mean us", 9, 13, [](const TierCell& c) { return decimal(real(c.row, "transfer_mean_us")); }},
    {"p99 us", 9, 8, [](const TierCell& c) { return decimal(real(c.row, "transfer_p99_us")); }},
};
constexpr std::size_t kNumColumns = std::size(kColumns);

// The most telling columns that fit in `width` (a prefix of the `keep`
// order, so a column never shows without a more telling one); shown in
// table order.
std::array<bool, kNumColumns> columns_fitting(std::size_t width) {
  std::array<std::size_t, kNumColumns> by_keep{};
  for (std::size_t i = 0; i < kNumColumns; ++i) by_keep[i] = i;
  std::ranges::sort(by_keep, {}, [](std::size_t i) { return kColumns[i].keep; });
  std::array<bool, kNumColumns> shown{};
  std::size_t used = 0;
  for (std::size_t i : by_keep) {
    const std::size_t need =
        static_cast<std::size_t>(std::abs(kColumns[i].width)) + (used > 0 ? 1 : 0);
    if (used + need > width) break;
    shown[i] = true;
    used += need;
  }
  return shown;
}

std::string padded(const std::string& text, int width) {
  const std::size_t w = static_cast<std::size_t>(std::abs(width));
  if (text.size() >= w) return text;
  const std::string pad(w - text.size(), ' ');
  return width < 0 ? text + pad : pad + text;
}

}  // namespace

std::string tier_table_text(const json& tiers, long missed_blocks, std::size_t width) {
  long looked_up = 0;
  if (missed_blocks >= 0) {
    looked_up = missed_blocks;
    for (const char* t : kTiers) looked_up += num(tiers.value(t, json::object()), "hits");
  }
  const auto shown = columns_fitting(width);
  auto line = [&](auto&& text_of) {
    std::string out;
    for (std::size_t i = 0; i < kNumColumns; ++i) {
      if (!shown[i]) continue;
      if (!out.empty()) out += ' ';
      out += padded(text_of(kColumns[i]), kColumns[i].width);
    }
    return out + "\n";
  };
  std::string out = line([](const Column& c) { return std::string(c.header); });
  for (const char* t : kTiers) {
    const json row = tiers.value(t, json::object());
    const TierCell cell{t, row, looked_up};
    out += line([&](const Column& c) { return c.cell(cell); });
  }
  // A tier on several servers: each one's breaker, and why it last failed.
  for (const char* t : kTiers) {
    for (const json& node : tiers.value(t, json::object()).value("nodes", json::array())) {
      out += std::string(t) + " node " + node.value("address", std::string("?")) + ": " +
             (node.value("available", false) ? "up" : "down (breaker open)") + ", breaker opened " +
             std::to_string(num(node, "breaker_opened")) + " times";
      const std::string why = node.value("last_error", std::string());
      if (!why.empty()) out += "; last error: " + why;
      out += "\n";
    }
  }
  return out;
}

std::string tier_costs_text(const json& costs) {
  const json samples = costs.value("samples", json::object());
  char part[160];
  // The prefill curve: what a pass costs per row, by its rows.
  std::string curve;
  const json points = costs.value("prefill", json::array());
  for (const json& p : points.is_array() ? points : json::array()) {
    const long rows = num(p, "rows");
    std::snprintf(part, sizeof(part), "%s%ld rows %.1f us/row (%ld)", curve.empty() ? "" : ", ",
                  rows, rows > 0 ? real(p, "pass_us") / static_cast<double>(rows) : 0.0,
                  num(p, "samples"));
    curve += part;
  }
  std::string out =
      "load or recompute: prefill passes " + (curve.empty() ? "not measured yet" : curve);
  for (int t = 1; t < kNumTiers; ++t) {  // L1 has nothing to load
    const std::string name = kTiers[static_cast<std::size_t>(t)];
    std::snprintf(part, sizeof(part), "; %s %.1f us + %.1f us/block (%ld)", kTierNames[t].label,
                  real(costs, (name + "_latency_us").c_str()),
                  real(costs, (name + "_per_block_us").c_str()), num(samples, name.c_str()));
    out += part;
  }
  return out + "\n";
}

std::expected<void, CallFailure> run_tiers(RpcClient& client, bool json_out) {
  auto result = client.call("tiers", json::object());
  if (!result) return std::unexpected(result.error());
  if (json_out) {
    std::cout << dump(*result) << "\n";
    return {};
  }
  const json tiers = result->value("tiers", json::object());
  // A daemon older than `missed_blocks` in `tiers` leaves the hit rates out.
  std::cout << tier_table_text(tiers, result->value("missed_blocks", -1L));
  // How each tier stores a block (int8: quantised, lossy, about 4x the
  // blocks) and what a block costs it: its slot (a daemon older than
  // slot_bytes gives the block's bytes alone).
  std::string formats;
  for (const char* t : kTiers) {
    const json row = tiers.value(t, json::object());
    const long slot = num(row, "slot_bytes");
    if (!formats.empty()) formats += "; ";
    formats += std::string(t) + " " + row.value("format", std::string("exact")) + " " +
               std::to_string(slot > 0 ? slot : num(row, "block_bytes")) + " bytes/block";
  }
  std::cout << "formats: " << formats << "\n"
            << tier_costs_text(result->value("costs", json::object()));
  return {};
}

std::expected<void, CallFailure> run_cache_prompt(RpcClient& client, const std::string& method,
                                                  const CachePrompt& prompt, bool json_out) {
  json params = json::object();
  if (!prompt.tokens.empty()) {
    params["tokens"] = prompt.tokens;
  } else {
    params["prompt"] = prompt.text;
  }
  if (!prompt.cache_salt.empty()) params["cache_salt"] = prompt.cache_salt;
  auto result = client.call(method, params);
  if (!result) return std::unexpected(result.error());
  const json& r = *result;
  if (json_out) {
    std::cout << dump(r) << "\n";
  } else if (method == "cache.lookup") {
    std::cout << num(r, "cached_tokens") << " of " << num(r, "prompt_tokens")
              << " prompt tokens cached (" << num(r, "cacheable_tokens")
              << " could be): " << per_tier(r.value("tiers", json::object())) << "\n";
  } else if (method == "cache.warm") {
    const json now = r.value("lookup", json::object());
    std::cout << "warmed: " << num(now, "cached_tokens") << " of " << num(r, "prompt_tokens")
              << " prompt tokens cached now (" << per_tier(now.value("tiers", json::object()))
              << "); "
              << "found already cached: " << per_tier(r.value("cached_tokens", json::object()))
              << "\n";
  } else {
    std::cout << (method == "cache.pin" ? "pinned " : "unpinned ") << num(r, "blocks")
              << " blocks (" << num(r, "tokens") << " tokens)\n";
  }
  return {};
}

std::expected<void, CallFailure> run_cache_tree(RpcClient& client, bool json_out) {
  auto result = client.call("cache.tree", json::object());
  if (!result) return std::unexpected(result.error());
  const json& r = *result;
  if (json_out) {
    std::cout << dump(r) << "\n";
    return {};
  }
  std::cout << "nodes " << num(r, "nodes") << "  leaves " << num(r, "leaves") << "  max depth "
            << num(r, "max_depth") << " blocks\n"
            << "blocks by tier: " << per_tier(r.value("blocks", json::object())) << "\n"
            << "pinned " << num(r, "pinned") << "  held " << num(r, "held") << "  in flight "
            << num(r, "in_flight") << "\n";
  const json largest = r.value("largest", json::array());
  if (!largest.empty()) std::cout << "largest families (first block's text):\n";
  for (const json& f : largest) {
    std::cout << "  " << dump(f.value("first_text", std::string())) << "  nodes " << num(f, "nodes")
              << "  depth " << num(f, "depth") << "  "
              << per_tier(f.value("blocks", json::object())) << "\n";
  }
  return {};
}

std::expected<void, CallFailure> run_cache_flush(RpcClient& client, const std::string& tier,
                                                 bool json_out) {
  auto result = client.call("cache.flush", {{"tier", tier}});
  if (!result) return std::unexpected(result.error());
  if (json_out) {
    std::cout << dump(*result) << "\n";
  } else {
    std::cout << "dropped blocks: " << per_tier(result->value("dropped", json::object())) << "\n";
  }
  return {};
}

}  // namespace kvtier::ctl

#include "ctl/cache_commands.h"

#include <array>
#include <cstdio>
#include <iostream>

#include "engine/tier.h"

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

}  // namespace

std::string tier_table_text(const json& tiers, long missed_blocks) {
  long looked_up = missed_blocks;
  if (missed_blocks >= 0) {
    for (const char* t : kTiers) looked_up += num(tiers.value(t, json::object()), "hits");
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-6s %-5s %15s %8s %6s %8s %8s %8s %8s %7s %6s %6s %9s %9s\n",
                "tier", "avail", "used/capacity", "hits", "hit%", "demoted", "promoted", "in MiB",
                "out MiB", "dropped", "cksum", "io_err", "mean us", "p99 us");
  out += line;
  for (const char* t : kTiers) {
    const json row = tiers.value(t, json::object());
    const std::string used =
        std::to_string(num(row, "used_blocks")) + "/" + std::to_string(num(row, "capacity_blocks"));
    std::string rate = "-";
    if (looked_up > 0) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "%.1f", 100.0 * num(row, "hits") / looked_up);
      rate = buf;
    }
    std::snprintf(line, sizeof(line),
                  "%-6s %-5s %15s %8ld %6s %8ld %8ld %8s %8s %7ld %6ld %6ld %9.1f %9.1f\n", t,
                  row.value("available", false) ? "yes" : "no", used.c_str(), num(row, "hits"),
                  rate.c_str(), num(row, "demotions"), num(row, "promotions"),
                  mib(num(row, "bytes_in")).c_str(), mib(num(row, "bytes_out")).c_str(),
                  num(row, "dropped"), num(row, "checksum_failures"), num(row, "io_errors"),
                  real(row, "transfer_mean_us"), real(row, "transfer_p99_us"));
    out += line;
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

std::expected<void, CallFailure> run_tiers(RpcClient& client, bool json_out) {
  auto result = client.call("tiers", json::object());
  if (!result) return std::unexpected(result.error());
  if (json_out) {
    std::cout << dump(*result) << "\n";
    return {};
  }
  const json costs = result->value("costs", json::object());
  const json tiers = result->value("tiers", json::object());
  std::cout << tier_table_text(tiers);
  // How each tier stores a block (int8: quantised, lossy, about 4x the blocks).
  std::string formats;
  for (const char* t : kTiers) {
    const json row = tiers.value(t, json::object());
    if (!formats.empty()) formats += "; ";
    formats += std::string(t) + " " + row.value("format", std::string("exact")) + " " +
               std::to_string(num(row, "block_bytes")) + " bytes/block";
  }
  std::cout << "formats: " << formats << "\n";
  // What the cost model weighs: a tier's load against recomputing.
  const json samples = costs.value("samples", json::object());
  std::printf("load or recompute: prefill %.1f us/token (%ld samples)",
              real(costs, "prefill_per_token_us"), num(samples, "prefill"));
  for (int t = 1; t < kNumTiers; ++t) {  // L1 has nothing to load
    const std::string name = kTiers[static_cast<std::size_t>(t)];
    std::printf("; %s %.1f us + %.1f us/block (%ld)", kTierNames[t].label,
                real(costs, (name + "_latency_us").c_str()),
                real(costs, (name + "_per_block_us").c_str()), num(samples, name.c_str()));
  }
  std::printf("\n");
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

#include "ctl/top.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "ctl/cache_commands.h"

namespace kvtier::ctl {

using nlohmann::json;

namespace {

long num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<long>() : 0;
}

// config.get's {"name": {"value": ...}} entry as text.
std::string setting(const json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end() || !it->contains("value")) return "?";
  const json& v = (*it)["value"];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string bar(double fraction, int width) {
  fraction = fraction < 0 ? 0 : (fraction > 1 ? 1 : fraction);
  const int filled = static_cast<int>(fraction * width + 0.5);
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), '.') + "]";
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string top_frame(const json& stats, const json& config, const std::optional<json>& previous,
                      double seconds) {
  const long used = num(stats, "blocks_used"), free = num(stats, "blocks_free");
  const long total = used + free;
  const long batch = num(stats, "prefilling") + num(stats, "running");
  std::string out;
  out += "kvtierd  connections " + std::to_string(num(stats, "connections")) + "   policy " +
         setting(config, "policy") + "   token_budget " + setting(config, "token_budget") + "\n";
  out += "requests waiting " + std::to_string(num(stats, "waiting")) + "  prefilling " +
         std::to_string(num(stats, "prefilling")) + "  running " +
         std::to_string(num(stats, "running")) + "  pending " +
         std::to_string(num(stats, "pending")) + " / " + setting(config, "max_pending") + "\n";
  out += "batch    " + std::to_string(batch) + " / " + setting(config, "max_batch_size") + "\n";
  out += "KV       " + bar(total > 0 ? double(used) / double(total) : 0, 30) + " " +
         std::to_string(used) + " / " + std::to_string(total) + " blocks (page_size " +
         setting(config, "page_size") + ")\n";
  out += "totals   submitted " + std::to_string(num(stats, "requests_submitted")) + "  completed " +
         std::to_string(num(stats, "requests_completed")) + "  cancelled " +
         std::to_string(num(stats, "requests_cancelled")) + "  failed " +
         std::to_string(num(stats, "requests_failed")) + "\n";
  out += "engine   steps " + std::to_string(num(stats, "steps")) + "  tokens " +
         std::to_string(num(stats, "tokens_generated")) + "  preemptions " +
         std::to_string(num(stats, "preemptions")) + "  recomputed tokens " +
         std::to_string(num(stats, "recomputed_tokens")) + "\n";
  // The tiers, once the daemon reports them (null: its prefix cache is off).
  if (auto cache = stats.find("cache"); cache != stats.end() && cache->is_object()) {
    out += "tiers    prefix cache: " + std::to_string(num(*cache, "lookups")) + " lookups, " +
           std::to_string(num(*cache, "recompute_tokens_avoided")) +
           " prompt tokens not recomputed\n";
    out += tier_table_text(cache->value("tiers", json::object()), num(*cache, "missed_blocks"));
  }
  if (previous && seconds > 0) {
    auto rate = [&](const char* key) {
      return fixed(double(num(stats, key) - num(*previous, key)) / seconds, 1);
    };
    out += "rates    " + rate("tokens_generated") + " tokens/s  " + rate("steps") + " steps/s  " +
           rate("requests_completed") + " requests/s\n";
  } else {
    out += "rates    (from the next frame on)\n";
  }
  return out;
}

std::expected<void, CallFailure> top_run(RpcClient& client, bool once, double interval_s) {
  using Clock = std::chrono::steady_clock;
  std::optional<json> previous;
  Clock::time_point previous_at;
  for (;;) {
    auto stats = client.call("stats", json::object());
    if (!stats) return std::unexpected(stats.error());
    auto config = client.call("config.get", json::object());
    if (!config) return std::unexpected(config.error());
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - previous_at).count();
    const std::string frame = top_frame(*stats, *config, previous, seconds);
    // Home and clear, then the frame: the view stays put in a terminal.
    if (!once) std::cout << "\x1b[H\x1b[2J";
    std::cout << frame << std::flush;
    if (once) return {};
    previous = std::move(*stats);
    previous_at = now;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

}  // namespace kvtier::ctl

#include "ctl/top.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Each line of `text` cut to `width` bytes (one column each for the ASCII
// that frames are), never inside a UTF-8 character.
std::string clipped(const std::string& text, std::size_t width) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::size_t cut = std::min(end, start + width);
    if (cut < end) {
      while (cut > start && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    }
    out.append(text, start, cut - start);
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace

std::size_t top_width() {
  winsize ws{};
  if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns && *columns) {
    std::size_t n = 0;
    const char* end = columns + std::strlen(columns);
    if (auto [p, ec] = std::from_chars(columns, end, n); ec == std::errc() && p == end && n > 0)
      return n;
  }
  return 80;
}

std::string top_frame(const json& stats, const json& config, const std::optional<json>& previous,
                      double seconds, std::size_t width) {
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
  // The bar gives way first on a narrow screen.
  const int bar_width = std::clamp(static_cast<int>(std::min<std::size_t>(width, 80)) - 50, 10, 30);
  out += "KV       " + bar(total > 0 ? double(used) / double(total) : 0, bar_width) + " " +
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
    out +=
        tier_table_text(cache->value("tiers", json::object()), num(*cache, "missed_blocks"), width);
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
  return clipped(out, width);
}

namespace {

// One frame from the daemon, printed; or why there is none.
std::expected<json, CallFailure> show_frame(RpcClient& client, const TopOptions& options,
                                            const std::optional<json>& previous, double seconds,
                                            bool clear) {
  auto stats = client.call("stats", json::object());
  if (!stats) return std::unexpected(stats.error());
  auto config = client.call("config.get", json::object());
  if (!config) return std::unexpected(config.error());
  if (options.json_out) {
    std::cout << json{{"stats", *stats}, {"config", *config}}.dump(-1, ' ', false,
                                                                   json::error_handler_t::replace)
              << std::endl;
    return stats;
  }
  const std::string frame = top_frame(*stats, *config, previous, seconds, top_width());
  // Home and clear, then the frame: the view stays put in a terminal.
  if (clear) std::cout << "\x1b[H\x1b[2J";
  std::cout << frame << std::flush;
  return stats;
}

}  // namespace

std::expected<void, CallFailure> top_run(const std::string& socket_path,
                                         const TopOptions& options) {
  using Clock = std::chrono::steady_clock;
  const bool clear = !options.once && !options.json_out && ::isatty(STDOUT_FILENO);
  std::optional<RpcClient> client;
  std::optional<json> previous;  // no rates across a reconnection: a new daemon counts anew
  Clock::time_point previous_at;
  bool reported_down = false;
  for (;;) {
    const auto now = Clock::now();
    auto stats = [&]() -> std::expected<json, CallFailure> {
      if (!client) {
        auto connected = RpcClient::connect(socket_path);
        if (!connected) return std::unexpected(connected.error());
        client.emplace(std::move(*connected));
      }
      return show_frame(*client, options, previous,
                        std::chrono::duration<double>(now - previous_at).count(), clear);
    }();
    if (stats) {
      previous = std::move(*stats);
      previous_at = now;
      reported_down = false;
    } else {
      if (options.once || stats.error().kind == CallFailure::kRpcError)
        return std::unexpected(stats.error());
      client.reset();
      previous.reset();
      // Once per outage: the screen keeps it until the next frame.
      if (!reported_down) {
        if (clear) std::cout << "\x1b[H\x1b[2J";
        std::cout << "kvtierd unreachable at " << socket_path << ", retrying...\n"
                  << stats.error().message << std::endl;
        reported_down = true;
      }
    }
    if (options.once) return {};
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_s));
  }
}

}  // namespace kvtier::ctl

// `kvtierctl top`: a live view of the daemon — requests, batch, KV blocks,
// the prefix cache's tiers and hit rates, counters and rates — redrawn every
// interval from `stats` and `config.get`.
#pragma once

#include <cstddef>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ctl/rpc_client.h"

namespace kvtier::ctl {

// One frame of text (no terminal control codes), no line wider than `width`
// characters. `previous` is the stats of the frame before, `seconds` the
// time between the two: with them the frame shows rates; without them (the
// first frame), it shows none.
std::string top_frame(const nlohmann::json& stats, const nlohmann::json& config,
                      const std::optional<nlohmann::json>& previous, double seconds,
                      std::size_t width);

// How wide top draws: the terminal's width when stdout is one, else
// $COLUMNS when set, else 80.
std::size_t top_width();

struct TopOptions {
  bool once = false;        // one frame, printed plainly, for scripts and tests
  double interval_s = 1.0;  // between frames, and between tries to reconnect
  bool json_out = false;    // each frame's inputs, {"stats": ..., "config": ...}, one line
};

// Draws frames from the daemon at `socket_path`. A live view outlives the
// daemon: when it cannot be reached the screen says so and top tries again
// every interval, going on with fresh frames once it answers. Returns only
// with `once` (a failure: unreachable or an error answer), or on an error
// answer. Frames clear the screen first when stdout is a terminal.
std::expected<void, CallFailure> top_run(const std::string& socket_path, const TopOptions& options);

}  // namespace kvtier::ctl

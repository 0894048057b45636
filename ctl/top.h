// `kvtierctl top`: a live view of the daemon — requests, batch, KV blocks,
// the prefix cache's tiers and hit rates, counters and rates — redrawn every
// interval from `stats` and `config.get`.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ctl/rpc_client.h"

namespace kvtier::ctl {

// One frame of text (no terminal control codes). `previous` is the stats of
// the frame before, `seconds` the time between the two: with them the
// frame shows rates; without them (the first frame), it shows none.
std::string top_frame(const nlohmann::json& stats, const nlohmann::json& config,
                      const std::optional<nlohmann::json>& previous, double seconds);

// Draws frames until the connection fails or, with `once`, after one frame
// (printed plainly, for scripts and tests). Live frames clear the terminal
// first.
std::expected<void, CallFailure> top_run(RpcClient& client, bool once, double interval_s);

}  // namespace kvtier::ctl

// The text forms of `kvtierctl stats`, `health` and `fleet`: the results
// of those methods (docs/protocol.md, docs/fleet.md) made readable.
//
// Both show every field the daemon sends, known or not, so a field added to
// the protocol is never hidden; the known ones are grouped and laid out.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::ctl {

// An aligned table, one "name  value" line per counter under a "# group"
// heading (requests, engine, KV blocks, anything else, then the prefix
// cache with its tier table and load costs), with the daemon's version on
// top when it says it.
std::string stats_text(const nlohmann::json& stats);

// One line: "ok  kvtierd 0.3 (rev abc)  device cpu  model 4 layers, ...",
// with the version and revision when the daemon says them; from a
// kvtier-router, "router: 2 of 3 daemons usable" too.
std::string health_text(const nlohmann::json& health);

// A generate result's prompt tokens served by each tier, in table order:
// "l1 16, l2 0, l3 32, remote 0".
std::string cached_tokens_text(const nlohmann::json& result);

// kvtier-router's `fleet` (docs/fleet.md): one line per daemon (usable,
// pending, blocks indexed per tier, times taken out, last error), then the
// router's choices by reason and the hits by tier, fleet-wide.
std::string fleet_text(const nlohmann::json& fleet);

}  // namespace kvtier::ctl

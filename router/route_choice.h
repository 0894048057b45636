// Which daemon a request goes to: the one whose first token is expected
// soonest, from what each daemon holds of the prompt (and in which tier),
// its own load-or-recompute figures and its load.
//
// For each daemon, in microseconds:
//
//   expected = min(load(match) + prefill(backlog + uncached rows),
//                  prefill(backlog + all rows))
//
// load(match): each lower tier's blocks of the leading run cost that tier's
// latency plus a per-block figure (`tiers.costs`; L1 blocks are free);
// prefill(rows): a pass of that many rows on the prefill curve; the min: a
// daemon recomputes a run when that is cheaper than loading it, and so does
// this estimate. backlog: the rows the daemon's passes hold before the
// request's own (`stats.backlog_rows`: prompts still to prefill, a decode
// row per running request): the daemon batches them with the newcomer's
// rows, so its first token comes after one batched prefill of both, not
// after each in turn. A count of requests would weigh a queued 200-token
// document like a one-token turn, and send new documents to a daemon
// already prefilling two.
//
// The prefill curve is the one of the daemon's kind (Router::plan): at each
// point, the median over the usable daemons of one device and thread count
// of what each measured. Daemons of one kind differ by noise, not by speed:
// two started together on a busy 2-core machine have measured a 20-row pass
// 1.6x to 11x apart, and with its own curve the one that measured itself
// fastest would take every new prompt until its backlog told. (How busy a
// daemon is shows in its backlog, which is measured, not estimated.)
//
// A tie is anything within kTieMargin of the best: what the curve and the
// tiers' figures leave of that noise (a prefill pass on a busy 2-core
// machine differs by up to ~25% between runs). Real differences (a block in
// L1 against a cold prefill, a GPU against a CPU) are several times, far
// outside it.
//
// Among ties, a daemon holding notably more of the prompt in L1 (more than
// kTieMargin of its blocks) than the others wins: sending the prompt
// elsewhere would load a second copy into the fleet's L1 for no gain in
// time. Then the highest rendezvous score of the prompt's affinity and the
// daemon's address wins. The affinity is the prompt's first page that no
// daemon holds (Router::plan): a prompt nobody holds yet goes to the same
// daemon from every router and every time, and its next turn finds its
// blocks there; prompts that differ only after a prefix every daemon holds
// (a shared system prompt or preamble) spread over the fleet rather than
// all going to the daemon that prefix's first block favours, which would
// leave the other daemons' L1 idle.
//
// The choice is a pure function of its inputs: two routers fed the same
// events and loads choose alike.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/cache/tier.h"
#include "router/block_index.h"

namespace kvtier::router {

// A daemon's load-or-recompute figures (its `tiers` method's `costs`).
struct CostFigures {
  std::vector<std::pair<int, double>> prefill;  // (rows, pass_us), rows ascending
  PerTier<double> latency_us;                   // L1's are 0
  PerTier<double> per_block_us;

  // A pass of `rows` rows: read off the line between the two points around
  // it; past the last point, that point's cost per row. 0 with no points.
  double prefill_us(int rows) const;

  // Refuses a missing or negative figure, naming it.
  static std::expected<CostFigures, std::string> parse(const nlohmann::json& costs);
};

// The prefill curve of a kind of daemon: at every rows value where any of
// `figures` has a point, the median of what each of their curves says there
// (one with no point says nothing). Empty when none has a point.
std::vector<std::pair<int, double>> median_curve(std::span<const CostFigures* const> figures);

// Why a daemon was chosen.
enum class Reason {
  kPrefix,  // it holds the longest-or-cheapest part of the prompt
  kLoad,    // another daemon holds more of it, but is busier
  kCold,    // no daemon holds any of it: load, then the rendezvous score
};
inline constexpr const char* kReasonNames[] = {"prefix", "load", "cold"};
inline const char* to_string(Reason r) { return kReasonNames[static_cast<int>(r)]; }

inline constexpr double kTieMargin = 0.25;

// Whether a daemon expected to take `cost` ties with the best, `best`:
// within kTieMargin of it (and a microsecond, for costs of 0).
inline bool ties(double cost, double best) { return cost <= best * (1 + kTieMargin) + 1.0; }

struct Candidate {
  PrefixMatch match;
  int backlog_rows = 0;  // rows its passes hold before the request's own
  const CostFigures* costs = nullptr;
  std::uint64_t rendezvous = 0;  // rendezvous_score(affinity, address)
};

struct Choice {
  int index = -1;  // into the candidates
  Reason reason = Reason::kCold;
  double expected_us = 0;
};

// The expected microseconds to a first token at `c` (see the top).
double expected_us(const Candidate& c, int prompt_tokens, int page_size);

// The choice among `candidates` (the daemons that may take the request);
// nullopt when there are none.
std::optional<Choice> choose(std::span<const Candidate> candidates, int prompt_tokens,
                             int page_size);

// A daemon's score for a prompt: mixes the prompt's affinity (its first
// block's key) with the daemon's address.
std::uint64_t rendezvous_score(std::uint64_t affinity, std::string_view address);

}  // namespace kvtier::router

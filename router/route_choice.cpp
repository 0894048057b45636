#include "router/route_choice.h"

#include <xxhash.h>

#include <algorithm>

namespace kvtier::router {

using nlohmann::json;

double CostFigures::prefill_us(int rows) const {
  if (prefill.empty() || rows <= 0) return 0;
  if (rows <= prefill.front().first)
    return prefill.front().second * rows / std::max(1, prefill.front().first);
  for (std::size_t i = 1; i < prefill.size(); ++i) {
    const auto [r1, c1] = prefill[i];
    if (rows > r1) continue;
    const auto [r0, c0] = prefill[i - 1];
    return c0 + (c1 - c0) * (rows - r0) / std::max(1, r1 - r0);
  }
  return prefill.back().second * rows / std::max(1, prefill.back().first);
}

std::expected<CostFigures, std::string> CostFigures::parse(const json& costs) {
  if (!costs.is_object()) return std::unexpected(std::string("costs is not an object"));
  CostFigures f;
  const auto points = costs.find("prefill");
  if (points == costs.end() || !points->is_array())
    return std::unexpected(std::string("costs lack a 'prefill' curve"));
  for (const json& p : *points) {
    if (!p.is_object() || !p.contains("rows") || !p.contains("pass_us") ||
        !p["rows"].is_number_integer() || !p["pass_us"].is_number() ||
        p["rows"].get<long long>() < 1 || p["rows"].get<long long>() > (1 << 24) ||
        !(p["pass_us"].get<double>() >= 0))
      return std::unexpected(std::string("a prefill point is not {rows >= 1, pass_us >= 0}"));
    f.prefill.emplace_back(p["rows"].get<int>(), p["pass_us"].get<double>());
  }
  std::sort(f.prefill.begin(), f.prefill.end());
  for (int t = 1; t < kNumTiers; ++t) {
    const std::string name = kTierNames[t].name;
    for (auto [suffix, out] : {std::pair{"_latency_us", &f.latency_us[t]},
                               std::pair{"_per_block_us", &f.per_block_us[t]}}) {
      const auto it = costs.find(name + suffix);
      if (it == costs.end()) continue;  // a tier a daemon does not have costs nothing to skip
      if (!it->is_number() || !(it->get<double>() >= 0))
        return std::unexpected("cost '" + name + suffix + "' is not a number >= 0");
      *out = it->get<double>();
    }
  }
  return f;
}

double expected_us(const Candidate& c, int prompt_tokens, int page_size) {
  static const CostFigures kNone;
  const CostFigures& f = c.costs ? *c.costs : kNone;
  double load = 0;
  for (int t = 1; t < kNumTiers; ++t)
    if (c.match.by_tier[t] > 0) load += f.latency_us[t] + c.match.by_tier[t] * f.per_block_us[t];
  const int uncached = std::max(0, prompt_tokens - c.match.blocks * page_size);
  const int ahead = std::max(0, c.backlog_rows);
  return std::min(load + f.prefill_us(ahead + uncached), f.prefill_us(ahead + prompt_tokens));
}

std::vector<std::pair<int, double>> median_curve(std::span<const CostFigures* const> figures) {
  std::vector<int> rows;
  std::vector<const CostFigures*> measured;
  for (const CostFigures* f : figures) {
    if (!f || f->prefill.empty()) continue;
    measured.push_back(f);
    for (const auto& point : f->prefill) rows.push_back(point.first);
  }
  std::ranges::sort(rows);
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<std::pair<int, double>> curve;
  std::vector<double> says(measured.size());
  for (int r : rows) {
    for (std::size_t i = 0; i < measured.size(); ++i) says[i] = measured[i]->prefill_us(r);
    std::ranges::sort(says);
    const std::size_t mid = says.size() / 2;
    curve.emplace_back(r, says.size() % 2 ? says[mid] : (says[mid - 1] + says[mid]) / 2);
  }
  return curve;
}

std::optional<Choice> choose(std::span<const Candidate> candidates, int prompt_tokens,
                             int page_size) {
  if (candidates.empty()) return std::nullopt;
  std::vector<double> cost(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i)
    cost[i] = expected_us(candidates[i], prompt_tokens, page_size);
  const double best = *std::min_element(cost.begin(), cost.end());
  // Among equals, those that hold the most of the prompt in L1 (within
  // kTieMargin of its blocks), then the rendezvous score.
  const auto in_l1 = [&](std::size_t i) {
    return candidates[i].match.by_tier[static_cast<int>(Tier::kL1)];
  };
  int most_l1 = 0;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (ties(cost[i], best)) most_l1 = std::max(most_l1, in_l1(i));
  const double l1_bar = most_l1 - kTieMargin * prompt_tokens / std::max(1, page_size);
  int chosen = -1;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!ties(cost[i], best) || in_l1(i) < l1_bar) continue;
    if (chosen < 0 || candidates[i].rendezvous > candidates[chosen].rendezvous)
      chosen = static_cast<int>(i);
  }
  int most_held = 0;
  for (const Candidate& c : candidates) most_held = std::max(most_held, c.match.blocks);
  Choice choice{chosen, Reason::kCold, cost[chosen]};
  if (candidates[chosen].match.blocks > 0 && candidates[chosen].match.blocks == most_held)
    choice.reason = Reason::kPrefix;
  else if (most_held > 0)
    choice.reason = Reason::kLoad;
  return choice;
}

std::uint64_t rendezvous_score(std::uint64_t affinity, std::string_view address) {
  return XXH3_64bits_withSeed(address.data(), address.size(), affinity);
}

}  // namespace kvtier::router

#include "engine/cache/cost_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

namespace kvtier {

void CostModel::Window::add(double sample) {
  if (!std::isfinite(sample) || sample < 0) return;
  samples_.push_back(sample);
  if (samples_.size() > kWindow) samples_.pop_front();
}

double CostModel::Window::median() const {
  if (samples_.empty()) return 0;
  std::vector<double> sorted(samples_.begin(), samples_.end());
  const auto mid = sorted.begin() + static_cast<long>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  if (sorted.size() % 2 == 1) return *mid;
  // An even count: the mean of the two middle samples.
  const double upper = *mid;
  const double lower = *std::max_element(sorted.begin(), mid);
  return (lower + upper) / 2;
}

double TierCosts::pass_seconds(int rows) const {
  if (prefill.empty() || rows <= 0) return 0;
  const auto above = std::find_if(prefill.begin(), prefill.end(),
                                  [&](const PassCost& p) { return p.rows >= rows; });
  if (above == prefill.begin()) return prefill.front().seconds;
  if (above == prefill.end()) return prefill.back().seconds / prefill.back().rows * rows;
  const PassCost& below = *(above - 1);
  const double t = static_cast<double>(rows - below.rows) / (above->rows - below.rows);
  return below.seconds + t * (above->seconds - below.seconds);
}

double TierCosts::prefill_seconds(int tokens, const PrefillShape& shape) const {
  if (tokens <= 0) return 0;
  const int chunk = std::max(1, shape.chunk);
  const int whole = tokens / chunk, rest = tokens % chunk;
  return whole * pass_seconds(chunk + shape.beside) +
         (rest > 0 ? pass_seconds(rest + shape.beside) : 0);
}

int TierCosts::prefill_samples() const {
  int n = 0;
  for (const PassCost& p : prefill) n += p.samples;
  return n;
}

std::string prefill_curve_text(std::span<const PassCost> curve) {
  if (curve.empty()) return "none";
  std::string out;
  for (const PassCost& p : curve) {
    char part[80];
    std::snprintf(part, sizeof(part), "%s%d rows %.1f us/row (%d)", out.empty() ? "" : ", ", p.rows,
                  p.seconds / p.rows * 1e6, p.samples);
    out += part;
  }
  return out;
}

void CostModel::add_prefill(double seconds, int rows) {
  if (rows <= 0 || !(seconds > 0) || !std::isfinite(seconds) || pinned_) return;
  const int c =
      std::min(kClasses - 1, static_cast<int>(std::bit_width(static_cast<unsigned>(rows))) - 1);
  pass_rows_[c].add(rows);
  pass_per_row_[c].add(seconds / rows);
  rebuild_prefill();
}

void CostModel::rebuild_prefill() {
  costs_.prefill.clear();
  for (int c = 0; c < kClasses; ++c) {
    if (pass_rows_[c].size() == 0) continue;
    const double rows = pass_rows_[c].median();
    // An even count's median rows may fall between two passes' rows.
    const int r = std::max(1, static_cast<int>(std::lround(rows)));
    costs_.prefill.push_back({r, r * pass_per_row_[c].median(), pass_rows_[c].size()});
  }
}

void CostModel::add_load(Tier tier, double latency_s, double per_block_s) {
  // Both or neither, so the two windows stay in step.
  if (!(latency_s >= 0 && per_block_s >= 0) || !std::isfinite(latency_s) ||
      !std::isfinite(per_block_s) || pinned_)
    return;
  load_latency_[tier].add(latency_s);
  load_per_block_[tier].add(per_block_s);
  costs_.load[tier] = {load_latency_[tier].median(), load_per_block_[tier].median(),
                       load_latency_[tier].size()};
}

void CostModel::pin(const TierCosts& costs) {
  costs_ = costs;
  pinned_ = true;
  // The curve as the windows would make it: ascending, one point a size,
  // none that pass_seconds() could divide by zero with.
  std::vector<PassCost>& curve = costs_.prefill;
  std::erase_if(curve, [](const PassCost& p) {
    return p.rows <= 0 || !(p.seconds > 0) || !std::isfinite(p.seconds);
  });
  std::ranges::sort(curve, {}, &PassCost::rows);
  const auto [first, last] = std::ranges::unique(curve, {}, &PassCost::rows);
  curve.erase(first, last);
}

RunPlan CostModel::plan(const CachedRun& run, int page_size, const PrefillShape& shape) const {
  const TierCosts& k = costs_;
  const LoadCost& load = k.load[run.tier];
  auto loading = [&](int reads) {
    return reads > 0 ? load.latency_s + reads * load.per_block_s : 0;
  };
  auto prefill = [&](int tokens) { return k.prefill_seconds(tokens, shape); };
  const double suffix = prefill(run.suffix_tokens);
  RunPlan best;
  best.load_s = loading(run.reads) + suffix;
  best.recompute_s = prefill(run.blocks * page_size + run.suffix_tokens);
  best.wait_s = best.load_s;
  if (k.prefill.empty() || run.blocks <= 0) return best;
  // The front recomputed in its own passes while the rest loads: the tail's
  // prefill starts when both are done.
  const int most = std::min(run.splittable, run.blocks - 1);
  for (int front = 1; front <= most; ++front) {
    const double wait = std::max(prefill(front * page_size), loading(run.reads - front)) + suffix;
    if (wait < best.wait_s) {
      best.recompute = front;
      best.wait_s = wait;
    }
  }
  if (best.recompute_s < best.wait_s) {
    best.recompute = run.blocks;
    best.wait_s = best.recompute_s;
  }
  return best;
}

}  // namespace kvtier

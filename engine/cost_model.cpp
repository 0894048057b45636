#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

void CostModel::add_prefill(double seconds, int tokens) {
  if (tokens <= 0 || !(seconds > 0) || pinned_) return;
  prefill_per_token_.add(seconds / tokens);
  costs_.prefill_per_token_s = prefill_per_token_.median();
  costs_.prefill_samples = prefill_per_token_.size();
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
}

bool CostModel::worth_loading(Tier tier, int blocks, int page_size) const {
  if (costs_.prefill_per_token_s <= 0) return true;
  const double n = blocks;
  const double load = costs_.load[tier].latency_s + n * costs_.load[tier].per_block_s;
  const double recompute = n * page_size * costs_.prefill_per_token_s;
  return load < recompute;
}

}  // namespace kvtier

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

void CostModel::add_l2_block(double seconds) {
  if (pinned_) return;
  l2_per_block_.add(seconds);
  costs_.l2_per_block_s = l2_per_block_.median();
  costs_.l2_samples = l2_per_block_.size();
}

void CostModel::add_l3(double latency_s, double per_block_s) {
  if (!std::isfinite(latency_s) || !std::isfinite(per_block_s) || pinned_) return;
  l3_latency_.add(latency_s);
  l3_per_block_.add(per_block_s);
  costs_.l3_latency_s = l3_latency_.median();
  costs_.l3_per_block_s = l3_per_block_.median();
  costs_.l3_samples = l3_latency_.size();
}

void CostModel::pin(const TierCosts& costs) {
  costs_ = costs;
  pinned_ = true;
}

bool CostModel::worth_loading_from_l3(int blocks, int page_size) const {
  if (costs_.prefill_per_token_s <= 0) return true;
  const double n = blocks;
  const double load = costs_.l3_latency_s + n * costs_.l3_per_block_s;
  const double recompute = n * page_size * costs_.prefill_per_token_s;
  return load < recompute;
}

}  // namespace kvtier

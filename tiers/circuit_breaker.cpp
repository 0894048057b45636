#include "tiers/circuit_breaker.h"

#include <algorithm>

namespace kvtier::tiers {

CircuitBreaker::CircuitBreaker(std::chrono::milliseconds backoff_initial,
                               std::chrono::milliseconds backoff_max,
                               std::function<Clock::time_point()> clock)
    : backoff_initial_(backoff_initial),
      backoff_max_(std::max(backoff_max, backoff_initial)),
      clock_(std::move(clock)) {}

CircuitBreaker::Clock::time_point CircuitBreaker::now() const {
  return clock_ ? clock_() : Clock::now();
}

CircuitBreaker::Admit CircuitBreaker::admit() {
  if (!open_) return Admit::kYes;
  if (probe_in_flight_ || now() < open_until_) return Admit::kNo;
  probe_in_flight_ = true;
  return Admit::kProbe;
}

bool CircuitBreaker::accepting() const {
  return !open_ || (!probe_in_flight_ && now() >= open_until_);
}

void CircuitBreaker::failure(bool probe) {
  if (!open_) {
    open_ = true;
    ++opened_;
    backoff_ = backoff_initial_;
    open_until_ = now() + backoff_;
  } else if (probe) {
    probe_in_flight_ = false;
    backoff_ = std::min(2 * backoff_, backoff_max_);
    open_until_ = now() + backoff_;
  }
}

void CircuitBreaker::success(bool probe) {
  if (!probe) return;
  open_ = false;
  probe_in_flight_ = false;
  backoff_ = std::chrono::milliseconds{0};
}

}  // namespace kvtier::tiers

// The breaker's cycle on a clock the test moves: open on a failure, one
// probe once the backoff has passed, closed by the probe's success, the wait
// doubled (up to its maximum) by a failed probe.
#include "tiers/circuit_breaker.h"

#include <gtest/gtest.h>

namespace kvtier::tiers {
namespace {

using namespace std::chrono_literals;
using Admit = CircuitBreaker::Admit;

class CircuitBreakerTest : public ::testing::Test {
 protected:
  CircuitBreaker::Clock::time_point now_{};
  CircuitBreaker breaker_{100ms, 300ms, [this] { return now_; }};
};

TEST_F(CircuitBreakerTest, OpensOnAFailureAndClosesByItsProbe) {
  EXPECT_EQ(breaker_.admit(), Admit::kYes);
  breaker_.failure(false);
  EXPECT_TRUE(breaker_.is_open());
  EXPECT_EQ(breaker_.opened(), 1);
  EXPECT_EQ(breaker_.admit(), Admit::kNo);
  EXPECT_FALSE(breaker_.accepting());
  now_ += 100ms;
  EXPECT_TRUE(breaker_.accepting());
  EXPECT_EQ(breaker_.admit(), Admit::kProbe);
  EXPECT_EQ(breaker_.admit(), Admit::kNo);  // one probe at a time
  EXPECT_FALSE(breaker_.accepting());
  breaker_.success(false);  // not the probe: says nothing
  EXPECT_TRUE(breaker_.is_open());
  breaker_.success(true);
  EXPECT_FALSE(breaker_.is_open());
  EXPECT_EQ(breaker_.admit(), Admit::kYes);
}

TEST_F(CircuitBreakerTest, AFailedProbeDoublesTheWaitUpToItsMaximum) {
  breaker_.failure(false);
  EXPECT_EQ(breaker_.open_until() - now_, 100ms);
  for (auto wait : {200ms, 300ms, 300ms}) {
    now_ = breaker_.open_until();
    ASSERT_EQ(breaker_.admit(), Admit::kProbe);
    breaker_.failure(true);
    EXPECT_EQ(breaker_.open_until() - now_, wait);
  }
  EXPECT_EQ(breaker_.opened(), 1);  // one opening, however many probes failed
}

TEST_F(CircuitBreakerTest, AFailureOfAnOperationStartedBeforeChangesNothing) {
  breaker_.failure(false);
  const auto until = breaker_.open_until();
  breaker_.failure(false);
  EXPECT_EQ(breaker_.open_until(), until);
  now_ = until;
  ASSERT_EQ(breaker_.admit(), Admit::kProbe);
  breaker_.abandon_probe();  // nothing was tried
  EXPECT_EQ(breaker_.admit(), Admit::kProbe);
}

}  // namespace
}  // namespace kvtier::tiers

// The wake-up completion sources share with a sleeping owner.
#include "tiers/wake_signal.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace kvtier::tiers {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kLong = std::chrono::milliseconds(60'000);

// Returns whether sleep(kLong) returned well before its timeout (because
// it was signalled, however slow the machine).
bool woken(WakeSignal& wake) {
  const auto start = Clock::now();
  wake.sleep(kLong);
  return Clock::now() - start < kLong / 2;
}

TEST(WakeSignalTest, ASignalWhileAwakeIsKeptForTheNextSleep) {
  WakeSignal wake;
  wake.waker()();
  EXPECT_TRUE(woken(wake));
}

TEST(WakeSignalTest, AnotherThreadWakesASleeper) {
  WakeSignal wake;
  std::thread t([w = wake.waker()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w();
  });
  EXPECT_TRUE(woken(wake));
  t.join();
}

TEST(WakeSignalTest, AWakerOutlivesItsSignal) {
  std::function<void()> waker;
  {
    WakeSignal wake;
    waker = wake.waker();
  }
  waker();  // no owner left to wake: harmless (ASan would see a use after free)
  SUCCEED();
}

}  // namespace
}  // namespace kvtier::tiers

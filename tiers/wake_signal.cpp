#include "tiers/wake_signal.h"

#include <condition_variable>
#include <mutex>

namespace kvtier::tiers {

struct WakeSignal::State {
  std::mutex mu;
  std::condition_variable cv;
  bool signalled = false;
};

WakeSignal::WakeSignal() : state_(std::make_shared<State>()) {}

WakeSignal::~WakeSignal() = default;

std::function<void()> WakeSignal::waker() const {
  return [state = state_] {
    {
      std::lock_guard lock(state->mu);
      state->signalled = true;
    }
    state->cv.notify_one();
  };
}

void WakeSignal::sleep(std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mu);
  state_->cv.wait_for(lock, timeout, [&] { return state_->signalled; });
  state_->signalled = false;
}

}  // namespace kvtier::tiers

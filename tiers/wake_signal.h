// A wake-up that any number of completion sources (the copy worker, a
// device's copy queue, a store's completion thread) share with one owner
// that sleeps until one of them has something for it. A signal that comes
// while the owner is awake is kept, so the next sleep returns at once: no
// completion is slept through.
//
// Threading: waker()'s functions from any thread, and valid as long as any
// copy of one is (they share the state, not the WakeSignal); sleep() for
// the owner's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace kvtier::tiers {

class WakeSignal {
 public:
  WakeSignal();
  ~WakeSignal();
  WakeSignal(const WakeSignal&) = delete;
  WakeSignal& operator=(const WakeSignal&) = delete;

  // What a completion source calls: quick, thread-safe.
  std::function<void()> waker() const;
  // Sleeps until a waker is called (one called since the last sleep counts)
  // or the timeout passes.
  void sleep(std::chrono::milliseconds timeout);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the wakers
};

}  // namespace kvtier::tiers

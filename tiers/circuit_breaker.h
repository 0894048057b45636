// The circuit breaker every failing medium goes behind (the L3 disk, each
// Redis node of the remote tier): after a failure nothing is tried for a
// while, then one operation goes through as the probe, and its success
// closes the breaker again by itself. A failed probe doubles the wait, up to
// a maximum; nothing ever keeps it open for good.
//
//   closed --failure--> open (for backoff) --time--> half open: one probe
//     ^                      ^                                 |
//     +------ success -------+------------ failure ------------+
//
// Only the probe speaks for the medium's present state: a failure of an
// operation started before the breaker opened changes nothing, and neither
// does the success of one that was not the probe.
//
// Not thread-safe: its owner guards it (L3 under its mutex, a Redis node on
// its I/O thread).
#pragma once

#include <chrono>
#include <functional>

namespace kvtier::tiers {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  // clock: empty means Clock::now; tests substitute one they advance by
  // hand.
  CircuitBreaker(std::chrono::milliseconds backoff_initial, std::chrono::milliseconds backoff_max,
                 std::function<Clock::time_point()> clock = {});

  enum class Admit { kNo, kYes, kProbe };
  // Whether an operation may be tried now; kProbe marks it as the half-open
  // breaker's probe, and no other is admitted until it reports back
  // (failure(true), success(true) or abandon_probe()).
  Admit admit();
  // Closed, or open but due for its probe: what admit() would not refuse.
  bool accepting() const;
  bool is_open() const { return open_; }
  // When an open breaker's probe is due.
  Clock::time_point open_until() const { return open_until_; }

  void failure(bool probe);
  void success(bool probe);
  // The probe was admitted but nothing was tried: the next operation probes.
  void abandon_probe() { probe_in_flight_ = false; }
  // How many times it opened.
  long opened() const { return opened_; }

 private:
  Clock::time_point now() const;

  std::chrono::milliseconds backoff_initial_, backoff_max_, backoff_{0};
  std::function<Clock::time_point()> clock_;
  bool open_ = false;
  bool probe_in_flight_ = false;
  Clock::time_point open_until_;
  long opened_ = 0;
};

}  // namespace kvtier::tiers

// The L1<->L2 copy worker: block copies between two pools of host memory,
// done on a thread of their own so that the engine thread goes on stepping
// other requests meanwhile. (With a GPU this is the job of a copy stream and
// its events; without one both pools are host memory and a thread does it.)
//
// Contract:
//  * copy() queues one copy and returns its ticket at once. The caller keeps
//    both buffers alive, leaves the source unchanged and does not touch the
//    destination until poll() has returned that ticket.
//  * Copies run one at a time in submission order (one thread: a block copy
//    is bound by memory bandwidth, which a second thread would share).
//  * poll() returns the tickets completed since the last call, each with its
//    latency from copy() to the end of the copy; drain() waits until no copy
//    is queued or running (their completions still come from poll()).
//  * on_complete, when given, runs on the worker thread after each
//    completion is queued, never under the worker's lock: it lets an owner
//    that waits for several sources wake up (KvCache::wait()).
//  * The destructor finishes every queued copy.
//
// Threading: copy, poll, drain and in_flight are for one thread (the
// engine's); the worker thread touches only the queues, under mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier::tiers {

struct CopyCompletion {
  std::uint64_t ticket = 0;
  std::chrono::nanoseconds latency{0};  // from copy() to the end of the copy
};

class CopyWorker {
 public:
  // How a block is copied (kernels::copy_block in the engine; tiers does not
  // depend on kernels).
  using CopyFn = void (*)(void* dst, const void* src, std::size_t bytes);

  explicit CopyWorker(CopyFn copy_fn, std::function<void()> on_complete = {});
  ~CopyWorker();
  CopyWorker(const CopyWorker&) = delete;
  CopyWorker& operator=(const CopyWorker&) = delete;

  std::uint64_t copy(std::byte* dst, const std::byte* src, std::size_t bytes);
  std::vector<CopyCompletion> poll();
  void drain();
  // Copies queued or running, not yet returned by poll().
  std::size_t in_flight() const { return in_flight_; }

 private:
  struct Job {
    std::uint64_t ticket;
    std::byte* dst;
    const std::byte* src;
    std::size_t bytes;
    std::chrono::steady_clock::time_point queued;
  };
  void run();

  CopyFn copy_fn_;
  std::function<void()> on_complete_;
  std::uint64_t next_ticket_ = 1;
  std::size_t in_flight_ = 0;  // the engine thread's own count

  std::mutex mu_;  // guards everything below
  std::condition_variable work_;
  std::condition_variable idle_;
  std::deque<Job> jobs_;
  bool busy_ = false;  // the worker is copying a job it took from jobs_
  bool stopping_ = false;
  std::vector<CopyCompletion> done_;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace kvtier::tiers

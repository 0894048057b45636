// The L1<->L2 copy worker: block moves between two pools of host memory,
// done on a thread of their own so that the engine thread goes on stepping
// other requests meanwhile. (With a GPU this is the job of a copy stream and
// its events; without one both pools are host memory and a thread does it.)
//
// A move is whatever Transfer the job names: a plain copy, or a copy that
// changes the bytes on the way (the engine's int8 encode into a quantised L2
// and decode out of it). The owner supplies the functions, so tiers/ neither
// depends on kernels/ nor knows what the bytes mean, and the source and
// destination sizes are the Transfer's business.
//
// Contract:
//  * copy() queues one move and returns its ticket at once. The caller keeps
//    both buffers and the Transfer alive, leaves the source unchanged and
//    does not touch the destination until poll() has returned that ticket.
//  * Moves start in submission order. The worker runs one at a time; an
//    owner with nothing else to do may run the next queued one itself
//    (help()), so two moves can overlap. A block copy is bound by memory
//    bandwidth, but one core does not reach it (about 11 of 18 GB/s here):
//    the engine, idle while its request waits for promotions, lends its
//    core instead of sleeping. Moves that overlap must not share a
//    destination, nor read what another writes; the owner's flags on each
//    block in transit (a CacheNode's Presence in each tier) already rule it out.
//  * poll() returns the tickets completed since the last call, each with its
//    latency from copy() to the end of the copy; drain() waits until no copy
//    is queued or running (their completions still come from poll()).
//  * on_complete, when given, runs on the worker thread after each
//    completion is queued, never under the worker's lock: it lets an owner
//    that waits for several sources wake up (KvCache::wait()).
//  * The destructor finishes every queued copy.
//
// Threading: copy, help, poll, drain and in_flight are for one thread (the
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

#include "tiers/copy_queue.h"

namespace kvtier::tiers {

class CopyWorker {
 public:
  // One move: reads the source, writes the destination. Runs on the worker
  // thread, one at a time.
  using Transfer = std::function<void(std::byte* dst, const std::byte* src)>;

  explicit CopyWorker(std::function<void()> on_complete = {});
  ~CopyWorker();
  CopyWorker(const CopyWorker&) = delete;
  CopyWorker& operator=(const CopyWorker&) = delete;

  // Queues transfer(dst, src). The worker keeps a pointer to `transfer`, not
  // a copy (nothing is allocated per move): it must outlive the move.
  std::uint64_t copy(std::byte* dst, const std::byte* src, const Transfer& transfer);
  // Runs the oldest queued move on the calling thread; false when none is
  // queued. Its completion comes from poll() like any other.
  bool help();
  std::vector<CopyCompletion> poll();
  void drain();
  // Moves queued or running, not yet returned by poll().
  std::size_t in_flight() const { return in_flight_; }

 private:
  struct Job {
    std::uint64_t ticket;
    std::byte* dst;
    const std::byte* src;
    const Transfer* transfer;
    std::chrono::steady_clock::time_point queued;
  };
  void run();
  // Runs `job` and queues its completion. Called without mu_ held.
  void finish(const Job& job);

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

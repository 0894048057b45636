// One engine for a cache's background block moves: the device's copy queue
// (tiers/copy_queue.h) for plain copies when there is one, the copy worker
// (tiers/copy_worker.h) for every other move, and a wake-up that both, and
// any other completion source the owner has (an L3 store), signal, so the
// owner can sleep until something it waits for has happened.
//
// Tickets: the two engines count from 1 each; a queue's tickets carry
// kQueueBit here so that they never meet the worker's. When the queue fails
// (a lost device), it is dropped at once and the owner's on_loss is told
// why; from then on moves run on the worker. The queue's moves still in
// flight never complete: queue_lost() stays true until the owner has thrown
// them away (its moves with kQueueBit) and calls forget_lost_queue(). A move
// started in between is not made at all, and gets a queue ticket too, so the
// owner fails it with the others (a block's moves are all on one engine).
//
// The contracts of the underlying engines hold for every move: the caller
// keeps both buffers and the Transfer alive and leaves them alone until
// poll() has returned the ticket.
//
// Threading: everything but the waker is for one thread (the owner's).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tiers/copy_queue.h"
#include "tiers/copy_worker.h"

namespace kvtier::tiers {

class BlockMover {
 public:
  static constexpr std::uint64_t kQueueBit = 1ULL << 63;

  // on_loss is called once, on the owner's thread, when the queue fails.
  explicit BlockMover(std::function<void(const std::string& why)> on_loss);
  ~BlockMover();
  BlockMover(const BlockMover&) = delete;
  BlockMover& operator=(const BlockMover&) = delete;

  // What completion sources call to wake a sleep_for_signal(): thread-safe,
  // quick, valid as long as any copy of it is.
  std::function<void()> waker() const;
  // Plain copies of `bytes` go to this queue from now on (it was made with
  // waker() as its completion callback).
  void use_queue(std::unique_ptr<CopyQueue> queue) { queue_ = std::move(queue); }
  bool has_queue() const { return queue_ != nullptr; }

  // Starts moving a block: on the queue as a plain copy of `bytes` when there
  // is one, else on the worker as `how`.
  std::uint64_t start(std::byte* dst, const std::byte* src, std::size_t bytes,
                      const CopyWorker::Transfer& how);
  // The moves completed since the last call, from both engines.
  std::vector<CopyCompletion> poll();
  // Whether the owner still has the lost queue's moves to throw away.
  bool queue_lost() const { return queue_lost_; }
  void forget_lost_queue() { queue_lost_ = false; }
  static bool on_queue(std::uint64_t ticket) { return (ticket & kQueueBit) != 0; }

  // Runs the oldest move queued on the worker on this thread; false if none.
  bool help() { return worker_ && worker_->help(); }
  // Waits until neither engine has a move queued or running.
  void drain();
  // Sleeps until a completion source signals (one that came since the last
  // sleep counts) or the timeout passes.
  void sleep_for_signal(std::chrono::milliseconds timeout);

 private:
  struct Wake {
    std::mutex mu;
    std::condition_variable cv;
    bool signalled = false;
    void signal();
  };
  void lose_queue(const std::string& why);

  std::function<void(const std::string&)> on_loss_;
  std::shared_ptr<Wake> wake_;  // shared with the completion callbacks
  std::uint64_t never_copied_ = 0;
  bool queue_lost_ = false;
  // Last: destroyed (joined, waited for) first. The worker is made at its
  // first move.
  std::unique_ptr<CopyQueue> queue_;
  std::unique_ptr<CopyWorker> worker_;
};

}  // namespace kvtier::tiers

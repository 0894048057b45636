// One engine for L2's background block moves (tiers/l2_store.h): the
// device's copy queue (tiers/copy_queue.h) for plain copies when there is
// one, the copy worker (tiers/copy_worker.h) for every other move. Both
// call the owner's waker (tiers/wake_signal.h) as moves complete.
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
// Threading: one thread (the owner's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tiers/copy_queue.h"
#include "tiers/copy_worker.h"

namespace kvtier::tiers {

class BlockMover {
 public:
  static constexpr std::uint64_t kQueueBit = 1ULL << 63;

  // waker is what the worker calls as each move completes (a queue is made
  // with it too); on_loss is called once, on the owner's thread, when the
  // queue fails.
  BlockMover(std::function<void()> waker, std::function<void(const std::string& why)> on_loss);
  ~BlockMover();
  BlockMover(const BlockMover&) = delete;
  BlockMover& operator=(const BlockMover&) = delete;

  // Plain copies of `bytes` go to this queue from now on (it was made with
  // the waker as its completion callback).
  void use_queue(std::unique_ptr<CopyQueue> queue) { queue_ = std::move(queue); }
  bool has_queue() const { return queue_ != nullptr; }

  // Starts moving a block: on the queue as a plain copy of `bytes` when there
  // is one, else on the worker as `how`.
  std::uint64_t start(std::byte* dst, const std::byte* src, std::size_t bytes,
                      const CopyWorker::Transfer& how);
  // A wake-up (the waker) once the moves started so far have completed: the
  // worker wakes the owner after each of its moves anyway; the queue is
  // asked to (CopyQueue::notify()).
  void notify();
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

 private:
  void lose_queue(const std::string& why);

  std::function<void()> waker_;
  std::function<void(const std::string&)> on_loss_;
  std::uint64_t never_copied_ = 0;
  bool queue_lost_ = false;
  // Last: destroyed (joined, waited for) first. The worker is made at its
  // first move.
  std::unique_ptr<CopyQueue> queue_;
  std::unique_ptr<CopyWorker> worker_;
};

}  // namespace kvtier::tiers

// L2: host slots for blocks, and the moves between them and L1 that run in
// the background. Every such move, down (a write: cleaning) or up (a read:
// a promotion), whole or in parts, starts with a ticket and completes once
// from poll() as a StoreCompletion, as a BlockStore's operations do: kOk, or
// kIoError when the device's copy queue was lost with it in flight, and
// what reached its destination is unknown.
//
// Unlike a BlockStore, L2 is addressed by slot: the owner's placement policy
// chooses which blocks stay (its LRU over every tier, the engine's
// engine/cache/placement_policy.h), so this store keeps the room (slots())
// and the moves, and the owner keeps the map of which block is where. A
// move's key only comes back in its completion. Single moves the owner
// must wait for anyway (a demotion, a swap stash) it makes on its own
// thread, through slots(); many at once it queues here and waits for
// (start(), poll()).
//
// Moves run on the block mover (tiers/block_mover.h): on the device's copy
// queue as plain copies once use_queue() gave one, on the copy worker
// otherwise.
//
// Contract:
//  * read() and write() queue a move; flush() starts what is queued, the
//    pieces of reads in parts piece-major (piece 0 of every read before
//    piece 1 of any: a forward pass needs the first layers first), and asks
//    for a wake-up as each round of pieces lands. start() starts them the
//    same way with no wake-up, for an owner that waits for them itself
//    (poll() or drain()): on a device queue each wake-up stalls the queue
//    (tiers/copy_queue.h).
//    landed(), help(), poll() and drain() flush first.
//  * The caller keeps the L1 buffer, the slot and the Transfer alive and
//    leaves them alone until poll() has returned the move, whatever its
//    status.
//  * landed(ticket): how many leading pieces of a read in flight are in its
//    destination; nullopt once it has completed (or failed) or for a ticket
//    not in flight. A completed move is pending() until poll() returns it.
//
// Threading: one thread (the owner's); completions wake the owner through
// the waker it gave (tiers/wake_signal.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tiers/block_key.h"
#include "tiers/block_mover.h"
#include "tiers/block_pool.h"
#include "tiers/block_store.h"

namespace kvtier::tiers {

class L2Store {
 public:
  using Transfer = CopyWorker::Transfer;

  // on_queue_loss is called once, on the owner's thread, when the device's
  // queue fails (its moves in flight then complete kIoError).
  L2Store(std::unique_ptr<BlockPool> slots, std::function<void()> waker,
          std::function<void(const std::string& why)> on_queue_loss);
  ~L2Store();
  L2Store(const L2Store&) = delete;
  L2Store& operator=(const L2Store&) = delete;

  BlockPool& slots() { return *slots_; }
  const BlockPool& slots() const { return *slots_; }
  // Plain copies go to this queue from now on (made with the owner's waker).
  void use_queue(std::unique_ptr<CopyQueue> queue) { mover_.use_queue(std::move(queue)); }

  // Queues the move of a block from src into `slot`: `bytes` through `how`
  // (`bytes` is what the queue copies; `how` may change the bytes, int8).
  std::uint64_t write(const BlockKey& key, int slot, const std::byte* src, std::size_t bytes,
                      const Transfer& how);
  // Queues the move of `slot`'s block into dst in `parts` pieces of
  // part_bytes, piece i from offset i * part_bytes to the same offset, each
  // through `how`; the pieces in `skip` (bit i: piece i) are not moved and
  // count as landed at once (one that skips every piece completes so).
  // Its completion's skipped_bytes says what stayed.
  std::uint64_t read(const BlockKey& key, int slot, std::byte* dst, std::size_t part_bytes,
                     const Transfer& how, int parts = 1, std::uint64_t skip = 0);
  void flush();
  void start();

  std::optional<int> landed(std::uint64_t ticket);
  bool pending(std::uint64_t ticket) const { return ops_.contains(ticket); }
  // Moves queued, in flight, or completed and not yet returned by poll().
  std::size_t in_flight() const { return ops_.size(); }
  // Completions since the last call, in the order the moves completed.
  std::vector<StoreCompletion> poll();
  // Runs the oldest move queued on the copy worker on this thread; false if
  // none is.
  bool help();
  // Waits until no move is running (their completions then wait for poll()).
  void drain();

 private:
  struct Op {
    BlockKey key;
    bool is_write = false;
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    std::size_t part_bytes = 0;
    const Transfer* how = nullptr;
    std::vector<bool> landed;  // by piece
    std::size_t skipped_bytes = 0;
    bool done = false;  // completed, in done_ for poll()
  };
  std::uint64_t queue(const BlockKey& key, bool is_write, std::byte* dst, const std::byte* src,
                      std::size_t part_bytes, const Transfer& how, int parts, std::uint64_t skip);
  void start_queued(bool wake);
  // Takes the mover's completions into the moves, and fails those the lost
  // queue had.
  void take();
  void complete(std::uint64_t ticket, Op& op, StoreStatus status, std::chrono::nanoseconds latency);

  std::unique_ptr<BlockPool> slots_;
  std::uint64_t last_ticket_ = 0;
  std::unordered_map<std::uint64_t, Op> ops_;  // until poll() returns them
  std::vector<std::uint64_t> queued_;          // not started, in order
  struct Piece {
    std::uint64_t ticket;  // the move's
    int index;
  };
  std::unordered_map<std::uint64_t, Piece> pieces_;  // by the mover's ticket
  std::vector<StoreCompletion> done_;
  // Last: destroyed (its worker joined, its queue waited for) first, while
  // the slots its moves touch exist.
  BlockMover mover_;
};

}  // namespace kvtier::tiers

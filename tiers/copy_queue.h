// An asynchronous engine for plain block copies between a pool in device
// memory and host memory that device reaches at bus speed: the L1<->L2 link
// when L1 is on a GPU (tiers/cuda/cuda_copy_stream.h is the CUDA one).
// KvCache moves exact blocks through it when the L1 pool offers one
// (DeviceLink, tiers/block_pool.h); between host pools, and for moves that
// change the bytes (int8), tiers/copy_worker.h does the job on a thread.
//
// Contract:
//  * copy() queues a copy of `bytes` and returns its ticket at once, or why
//    it could not; a failed copy() leaves nothing in flight, and both buffers
//    are the caller's again. Otherwise the caller keeps both buffers alive,
//    leaves the source unchanged and does not touch the destination until
//    poll() has returned the ticket.
//  * Copies end in submission order. poll() returns the tickets completed
//    since the last call, oldest first, each with its latency from copy() to
//    when it was seen complete.
//  * drain() waits until every queued copy has ended; their completions
//    still come from poll().
//  * An error from poll() or drain() means the engine is lost (CUDA makes a
//    failed copy sticky: the context is gone): no copy in flight will be
//    reported complete, and the owner stops using the queue.
//  * notify() asks for a wake-up: the on_complete its maker was given is
//    called, from a thread of the engine's, once every copy queued before it
//    has ended (an engine may call it more often, after each copy). An owner
//    that sleeps until copies end calls notify() after queueing them: one
//    wake-up for a batch rather than one per copy, which on a GPU would make
//    the stream wait for the host after every copy. on_complete is quick and
//    thread-safe and makes no calls back into the queue.
//
// Threading: every member function is for one thread (the engine's).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

namespace kvtier::tiers {

struct CopyCompletion {
  std::uint64_t ticket = 0;
  std::chrono::nanoseconds latency{0};  // from copy() to the end of the copy
};

class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  virtual std::expected<std::uint64_t, std::string> copy(std::byte* dst, const std::byte* src,
                                                         std::size_t bytes) = 0;
  virtual std::expected<void, std::string> notify() = 0;
  virtual std::expected<std::vector<CopyCompletion>, std::string> poll() = 0;
  virtual std::expected<void, std::string> drain() = 0;
  // Copies queued and not yet returned by poll().
  virtual std::size_t in_flight() const = 0;
};

}  // namespace kvtier::tiers

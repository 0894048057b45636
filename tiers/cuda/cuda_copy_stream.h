// The L1<->L2 copy stream on a GPU: block copies between device memory and
// page-locked host memory (tiers/cuda/cuda_memory.h), queued on a CUDA stream
// of their own so that they overlap the engine's kernels and host work: the
// CUDA CopyQueue (tiers/copy_queue.h), which a pool laid over
// cuda_device_region offers the tiers under it (DeviceLink). CUDA failures
// come back as the runtime's messages.
//
// Contract:
//  * copy() enqueues one cudaMemcpyAsync and an event behind it, and returns
//    the copy's ticket at once. The caller keeps both buffers alive, leaves
//    the source unchanged and does not touch the destination until poll() has
//    returned that ticket.
//  * Both buffers must be device, managed or page-locked host memory
//    (cudaMalloc, cudaMallocManaged, cudaHostAlloc or cudaHostRegister).
//    copy() refuses pageable host memory: with it cudaMemcpyAsync silently
//    turns synchronous and the engine would stall on every move. (A pointer
//    CUDA does not know, null included, is refused the same way.)
//  * Copies run one at a time in submission order. poll() returns the tickets
//    completed since the last call, in that order, each with its latency from
//    copy() to the poll() that found it complete: an upper bound, as the
//    device tells the host when a copy ended only through an event.
//  * drain() waits until every enqueued copy has ended; their completions
//    still come from poll().
//  * notify() enqueues a host function (cudaLaunchHostFunc) behind the copies
//    enqueued so far, which calls on_complete on a thread of the CUDA runtime
//    once they have ended: it lets an owner that waits for several sources
//    wake up (KvCache::wait()). The stream waits for each host function to
//    run before its next copy starts, some 30 us on an H200 (tier_bench: 756
//    layer copies each with one took an L2 hit from 6 ms to 28 ms), so the
//    owner asks once per batch, not once per copy. on_complete must be quick
//    and thread-safe and must not call CUDA (the runtime forbids it there).
//    Without one notify() does nothing, and the stream never waits for the
//    host.
//  * Errors are the CUDA runtime's messages. A failed copy() takes no ticket
//    and leaves nothing in flight: both buffers are the caller's again. An
//    error from poll() or drain() means a copy failed on the device, which
//    CUDA makes sticky (the context is lost): the stream is of no further use.
//  * Events are pooled: a copy takes one from a free list and poll() gives it
//    back, so the stream holds as many events as it ever had copies in flight.
//  * The destructor waits for every enqueued copy.
//
// Threading: every member function is for one thread (the engine's), whose
// current device must be the one current at create(): the stream and its
// events belong to that device. The CUDA runtime's thread runs only
// on_complete.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tiers/copy_queue.h"

namespace kvtier::tiers {

class CudaCopyStream final : public CopyQueue {
 public:
  // A non-blocking stream (it does not wait for work on the legacy default
  // stream) on the current device, or why none could be made (no device, no
  // driver).
  static std::expected<std::unique_ptr<CudaCopyStream>, std::string> create(
      std::function<void()> on_complete = {});
  ~CudaCopyStream() override;
  CudaCopyStream(const CudaCopyStream&) = delete;
  CudaCopyStream& operator=(const CudaCopyStream&) = delete;

  // Enqueues a copy of `bytes` from src to dst. REQUIRES: both ranges lie
  // inside their allocations and do not overlap.
  std::expected<std::uint64_t, std::string> copy(std::byte* dst, const std::byte* src,
                                                 std::size_t bytes) override;
  // A call of on_complete once every copy enqueued so far has ended.
  std::expected<void, std::string> notify() override;
  // Completed copies, oldest first. On an error, the completions found before
  // it are returned first and the error by the next call.
  std::expected<std::vector<CopyCompletion>, std::string> poll() override;
  std::expected<void, std::string> drain() override;
  // Copies enqueued and not yet returned by poll().
  std::size_t in_flight() const override { return pending_.size(); }

 private:
  struct Pending {
    std::uint64_t ticket;
    cudaEvent_t event;
    std::chrono::steady_clock::time_point queued;
  };
  CudaCopyStream(cudaStream_t stream, std::function<void()> on_complete);
  // An event from the free list, or a new one.
  std::expected<cudaEvent_t, std::string> take_event();
  // Why ptr cannot be one end of a copy, or empty when it can.
  static std::string refuse(const char* end, const void* ptr);

  cudaStream_t stream_;
  // Host functions in flight point at it: the stream neither moves nor goes
  // before they have run (the destructor waits).
  std::function<void()> on_complete_;
  std::uint64_t next_ticket_ = 1;
  std::deque<Pending> pending_;  // submission order, which is completion order
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace kvtier::tiers

// One preallocated file of fixed-size slots, read and written asynchronously
// through io_uring: the L3 store's data half (tiers/l3_index.h is the other).
//
// The file is created (or reused) at num_slots * slot_bytes bytes and
// preallocated with fallocate, so a write into a slot never has to find disk
// space and a full disk shows up at open, not mid-run. The space is counted
// before it is taken: open() refuses unless the file system keeps
// keep_free_bytes free after allocating what the file still lacks (its
// allocated blocks, st_blocks, count as had: reopening a slab of the same
// size needs nothing). A failed open leaves nothing behind: a file it
// created is removed, a file that was there goes back to its previous size
// (fallocate that fails with ENOSPC keeps what it allocated so far; the
// truncation gives it back). It is opened O_DIRECT:
// blocks go straight between the caller's buffers and the device without
// passing through (and evicting) the page cache. Every transfer is one whole
// slot or, for reads, a kAlignment-aligned range of one (enqueue_read_range),
// so buffers must be kAlignment-aligned and as long as the transfer.
//
// Requests are queued and handed to the kernel in batches (one io_uring_enter
// for many requests); at most queue_depth are in the kernel at once, the rest
// wait in a software queue that the completion thread tops up as requests
// finish. One completion thread reaps the completions and calls the
// caller's callback for each.
//
// Threading: enqueue(), flush() and wait_idle() may be called from any one
// thread (the L3 store's engine thread); the callbacks run on the completion
// thread. A mutex guards the submission side of the ring and the software
// queue; the completion side belongs to the completion thread alone.
#pragma once

#include <liburing.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::tiers {

struct SlabFileOptions {
  std::string path;            // the file; created if missing, resized to num_slots * slot_bytes
  std::size_t slot_bytes = 0;  // REQUIRES: a positive multiple of SlabFile::kAlignment
  std::size_t num_slots = 0;   // REQUIRES: > 0
  int queue_depth = 64;        // requests in the kernel at once; more wait in a software queue
  // Requests queued before enqueue() submits them by itself; flush() submits
  // the rest. Larger batches mean fewer system calls, smaller ones less delay.
  int submit_batch = 16;
  // Bytes the file system must still have free (statvfs f_bavail) once the
  // file is allocated; 0: it may take every free byte.
  std::uint64_t keep_free_bytes = 0;
};

class SlabFile {
 public:
  // O_DIRECT buffers, offsets and lengths must be multiples of this.
  static constexpr std::size_t kAlignment = 4096;

  // Called on the completion thread for each request: its tag and io_uring's
  // result, the bytes transferred (the request's length: slot_bytes(), or
  // the range's; anything less is a short transfer and a failure) or -errno.
  using OnComplete = std::function<void(std::uint64_t tag, int result)>;
  // Called when io_uring_submit fails (-errno), on whichever thread
  // submitted. The requests stay queued in the ring and are submitted again
  // by the next flush(), or when a completion comes in.
  using OnSubmitError = std::function<void(int error)>;

  // Opens or creates the file, preallocates it (fallocate) and starts the
  // completion thread. An error says which step failed (open, free space,
  // fallocate, io_uring_queue_init) and why; a refusal for space names the
  // bytes needed and the bytes free. On any error the file is as it was
  // before (or gone, if this call created it). Where the file system
  // refuses O_DIRECT the file is opened buffered instead and direct() says
  // so.
  static std::expected<std::unique_ptr<SlabFile>, std::string> open(const SlabFileOptions& options,
                                                                    OnComplete on_complete,
                                                                    OnSubmitError on_submit_error);

  // Waits for every request, stops the completion thread, closes the file.
  ~SlabFile();
  SlabFile(const SlabFile&) = delete;
  SlabFile& operator=(const SlabFile&) = delete;

  // Queues a read of slot `slot` into dst / a write of src into it; `tag`
  // comes back in the completion. Submits the queue when it holds
  // submit_batch requests. REQUIRES: slot < num_slots(); the buffer is
  // kAlignment-aligned, slot_bytes() long and stays valid (and, for a write,
  // unchanged) until the completion.
  void enqueue_read(std::size_t slot, std::byte* dst, std::uint64_t tag);
  void enqueue_write(std::size_t slot, const std::byte* src, std::uint64_t tag);
  // Queues a read of `bytes` bytes at `offset` inside slot `slot` into dst.
  // REQUIRES: offset and bytes multiples of kAlignment, bytes > 0, offset +
  // bytes <= slot_bytes(); dst kAlignment-aligned, bytes long.
  void enqueue_read_range(std::size_t slot, std::size_t offset, std::size_t bytes, std::byte* dst,
                          std::uint64_t tag);

  // Hands every queued request the queue depth allows to the kernel.
  void flush();

  // Flushes, then blocks until every request has completed and its callback
  // has returned.
  void wait_idle();

  // Makes the writes completed so far durable (fdatasync): O_DIRECT skips
  // the page cache, but not the device's write cache, nor the metadata that
  // marks fallocate()d extents written. 0, or the -errno.
  int sync();

  // The bytes fallocate must still find for a file of `bytes` bytes at
  // `path`: all of them for a missing file, none for one whose allocated
  // blocks cover them. An error when the file exists but cannot be stat()ed.
  static std::expected<std::uint64_t, std::string> bytes_to_allocate(const std::string& path,
                                                                     std::uint64_t bytes);

  std::size_t slot_bytes() const { return options_.slot_bytes; }
  std::size_t num_slots() const { return options_.num_slots; }
  std::uint64_t offset(std::size_t slot) const { return slot * options_.slot_bytes; }
  bool direct() const { return direct_; }
  const std::string& path() const { return options_.path; }

 private:
  struct Request {
    bool write;
    std::size_t slot;
    std::byte* buf;
    std::uint64_t tag;
    std::size_t offset;  // inside the slot
    std::size_t bytes;
  };

  SlabFile(const SlabFileOptions& options, OnComplete on_complete, OnSubmitError on_submit_error);
  void enqueue(Request request);
  // Moves queued requests into the ring and submits them: 0, or the -errno
  // of a failed io_uring_submit, which the caller reports to
  // on_submit_error_ once mu_ is released (callbacks never run under mu_).
  // REQUIRES: mu_ held.
  int submit_locked();
  void completion_loop();

  SlabFileOptions options_;
  OnComplete on_complete_;
  OnSubmitError on_submit_error_;
  int fd_ = -1;
  bool direct_ = true;
  io_uring ring_{};
  bool ring_ready_ = false;
  std::thread completion_thread_;

  std::mutex mu_;  // guards everything below and the ring's submission queue
  std::condition_variable idle_;
  std::deque<Request> queued_;  // not yet in the ring
  int in_ring_ = 0;             // in the ring, completion not yet reaped
  int unfinished_ = 0;          // enqueued, callback not yet returned
  // The last io_uring_submit failed, or took only some of the ring's
  // requests (the kernel may stop early): submit again on the next flush()
  // or completion.
  bool unsubmitted_ = false;
};

}  // namespace kvtier::tiers

#include "tiers/slab_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "tiers/disk_space.h"

namespace kvtier::tiers {

namespace {

// user_data of the no-op that tells the completion thread to stop; the store's
// tickets count up from 1 and never get here.
constexpr std::uint64_t kStopTag = ~std::uint64_t{0};

std::string errno_text(int error) { return std::strerror(error); }

// What a file of `bytes` bytes still lacks beyond its allocated blocks.
std::uint64_t unallocated(const struct stat& st, std::uint64_t bytes) {
  const auto allocated = static_cast<std::uint64_t>(st.st_blocks) * 512;
  return allocated >= bytes ? 0 : bytes - allocated;
}

}  // namespace

std::expected<std::uint64_t, std::string> SlabFile::bytes_to_allocate(const std::string& path,
                                                                      std::uint64_t bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return unallocated(st, bytes);
  if (errno == ENOENT) return bytes;
  return std::unexpected("slab " + path + ": stat: " + errno_text(errno));
}

SlabFile::SlabFile(const SlabFileOptions& options, OnComplete on_complete,
                   OnSubmitError on_submit_error)
    : options_(options),
      on_complete_(std::move(on_complete)),
      on_submit_error_(std::move(on_submit_error)) {}

std::expected<std::unique_ptr<SlabFile>, std::string> SlabFile::open(
    const SlabFileOptions& options, OnComplete on_complete, OnSubmitError on_submit_error) {
  if (options.slot_bytes == 0 || options.slot_bytes % kAlignment != 0)
    return std::unexpected("slab " + options.path + ": slot size " +
                           std::to_string(options.slot_bytes) + " is not a positive multiple of " +
                           std::to_string(kAlignment));
  if (options.num_slots == 0) return std::unexpected("slab " + options.path + ": no slots");
  if (options.queue_depth < 1)
    return std::unexpected("slab " + options.path + ": queue depth must be at least 1");

  std::unique_ptr<SlabFile> slab(
      new SlabFile(options, std::move(on_complete), std::move(on_submit_error)));
  const char* path = options.path.c_str();
  // What was there decides what a failure must undo: a file this call
  // creates is removed, one that was there goes back to its size.
  struct stat before {};
  const bool existed = ::stat(path, &before) == 0;
  // Undoes what this call did to the file, then says what failed.
  auto fail = [&](const std::string& what) {
    if (!existed) {
      ::unlink(path);
    } else if (slab->fd_ >= 0) {
      // Back to its size, which also frees what a failed fallocate had
      // allocated past it. If this fails too, the message below still holds.
      [[maybe_unused]] const int ignored = ::ftruncate(slab->fd_, before.st_size);
    }
    return std::unexpected("slab " + options.path + ": " + what);
  };
  slab->fd_ = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
  if (slab->fd_ < 0 && errno == EINVAL) {
    // The file system has no O_DIRECT (tmpfs before Linux 6.6): go through the
    // page cache rather than not at all.
    slab->direct_ = false;
    slab->fd_ = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  if (slab->fd_ < 0) return fail("open: " + errno_text(errno));

  const auto bytes = static_cast<off_t>(options.slot_bytes * options.num_slots);
  struct stat st {};
  if (::fstat(slab->fd_, &st) != 0) return fail("fstat: " + errno_text(errno));
  // Only what the file lacks is taken, and only if keep_free_bytes stay
  // free: fallocate alone would take every last byte before it failed.
  const std::uint64_t needed = unallocated(st, static_cast<std::uint64_t>(bytes));
  if (needed > 0) {
    const auto space = disk_space(options.path);
    if (!space) return fail(space.error());
    const std::uint64_t free = space->free;
    if (free < needed || free - needed < options.keep_free_bytes)
      return fail("needs " + std::to_string(needed) + " more bytes and " +
                  std::to_string(options.keep_free_bytes) +
                  " bytes left free after them, but the file system has " + std::to_string(free) +
                  " bytes free");
  }

  // The ring before the allocation: once the file has grown, only the
  // allocation itself can fail.
  const int rc = io_uring_queue_init(static_cast<unsigned>(options.queue_depth), &slab->ring_, 0);
  if (rc < 0) return fail("io_uring_queue_init: " + errno_text(-rc));
  slab->ring_ready_ = true;

  // Already-allocated ranges are left as they are, so reopening keeps the data.
  if (::fallocate(slab->fd_, 0, 0, bytes) != 0)
    return fail("fallocate " + std::to_string(bytes) + " bytes: " + errno_text(errno));
  if (st.st_size > bytes && ::ftruncate(slab->fd_, bytes) != 0)  // a smaller capacity than before
    return fail("ftruncate: " + errno_text(errno));
  slab->completion_thread_ = std::thread([s = slab.get()] { s->completion_loop(); });
  return slab;
}

SlabFile::~SlabFile() {
  if (completion_thread_.joinable()) {
    wait_idle();
    {
      std::lock_guard lock(mu_);
      // Nothing is in the ring, so there is room for the stop request.
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kStopTag);
      while (io_uring_submit(&ring_) < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    completion_thread_.join();
  }
  if (ring_ready_) io_uring_queue_exit(&ring_);
  if (fd_ >= 0) ::close(fd_);
}

void SlabFile::enqueue_read(std::size_t slot, std::byte* dst, std::uint64_t tag) {
  enqueue({false, slot, dst, tag, 0, options_.slot_bytes});
}

void SlabFile::enqueue_read_range(std::size_t slot, std::size_t offset, std::size_t bytes,
                                  std::byte* dst, std::uint64_t tag) {
  assert(offset % kAlignment == 0 && bytes % kAlignment == 0 && bytes > 0);
  assert(offset + bytes <= options_.slot_bytes);
  enqueue({false, slot, dst, tag, offset, bytes});
}

void SlabFile::enqueue_write(std::size_t slot, const std::byte* src, std::uint64_t tag) {
  // io_uring_prep_write takes a const buffer; the cast only lets one Request
  // type carry both directions.
  enqueue({true, slot, const_cast<std::byte*>(src), tag, 0, options_.slot_bytes});
}

void SlabFile::enqueue(Request request) {
  int error = 0;
  {
    std::lock_guard lock(mu_);
    queued_.push_back(request);
    ++unfinished_;
    if (queued_.size() >= static_cast<std::size_t>(options_.submit_batch)) error = submit_locked();
  }
  if (error != 0) on_submit_error_(error);
}

void SlabFile::flush() {
  int error = 0;
  {
    std::lock_guard lock(mu_);
    error = submit_locked();
  }
  if (error != 0) on_submit_error_(error);
}

void SlabFile::wait_idle() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!queued_.empty() || unsubmitted_) {
      if (const int error = submit_locked(); error != 0) {
        lock.unlock();
        on_submit_error_(error);
        lock.lock();
      }
    }
    if (unfinished_ == 0) return;
    // The wake-up comes from the completion thread; the timeout only retries
    // a submission the kernel refused.
    idle_.wait_for(lock, std::chrono::milliseconds(10));
  }
}

int SlabFile::sync() { return ::fdatasync(fd_) == 0 ? 0 : -errno; }

int SlabFile::submit_locked() {
  bool added = false;
  while (!queued_.empty() && in_ring_ < options_.queue_depth) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;  // cannot happen while in_ring_ <= queue_depth; be safe
    const Request r = queued_.front();
    queued_.pop_front();
    const auto len = static_cast<unsigned>(r.bytes);
    if (r.write)
      io_uring_prep_write(sqe, fd_, r.buf, len, offset(r.slot) + r.offset);
    else
      io_uring_prep_read(sqe, fd_, r.buf, len, offset(r.slot) + r.offset);
    io_uring_sqe_set_data64(sqe, r.tag);
    ++in_ring_;
    added = true;
  }
  if (!added && !unsubmitted_) return 0;
  // After a failed or partial submit the requests are still in the
  // submission ring; io_uring_submit hands over everything the kernel has
  // not consumed yet.
  const int rc = io_uring_submit(&ring_);
  unsubmitted_ = rc < 0 || io_uring_sq_ready(&ring_) > 0;
  return rc < 0 ? rc : 0;
}

void SlabFile::completion_loop() {
  struct Done {
    std::uint64_t tag;
    int result;
  };
  std::vector<Done> done;
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc < 0) {
      if (rc != -EINTR && rc != -EAGAIN) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    done.clear();
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      done.push_back({cqe->user_data, cqe->res});
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);

    // Top the kernel's queue up before running the callbacks (which hash
    // whole blocks), so the device is not idle while they run.
    bool stop = false;
    int finished = 0;
    for (const Done& d : done) {
      if (d.tag == kStopTag)
        stop = true;
      else
        ++finished;
    }
    int error = 0;
    {
      std::lock_guard lock(mu_);
      in_ring_ -= finished;
      if (!queued_.empty() || unsubmitted_) error = submit_locked();
    }
    if (error != 0) on_submit_error_(error);
    for (const Done& d : done)
      if (d.tag != kStopTag) on_complete_(d.tag, d.result);
    {
      std::lock_guard lock(mu_);
      unfinished_ -= finished;
      if (unfinished_ == 0) idle_.notify_all();
    }
    if (stop) return;
  }
}

}  // namespace kvtier::tiers

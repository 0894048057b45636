// Shared by the tests that do real I/O through io_uring and O_DIRECT
// (slab_file_test.cpp, l3_store_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <liburing.h>

#include <cstddef>
#include <cstdlib>

namespace kvtier::test_util {

// Skips the calling test where the kernel or a sandbox refuses io_uring.
#define SKIP_WITHOUT_IO_URING()                                              \
  do {                                                                       \
    io_uring probe_ring;                                                     \
    const int probe_rc = io_uring_queue_init(2, &probe_ring, 0);             \
    if (probe_rc < 0) GTEST_SKIP() << "io_uring unavailable: " << -probe_rc; \
    io_uring_queue_exit(&probe_ring);                                        \
  } while (false)

// A buffer O_DIRECT accepts: 4096-aligned, n a multiple of 4096.
struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t n = 8192)
      : bytes(static_cast<std::byte*>(std::aligned_alloc(4096, n))), size(n) {}
  ~AlignedBuffer() { std::free(bytes); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : bytes(o.bytes), size(o.size) { o.bytes = nullptr; }
  AlignedBuffer(const AlignedBuffer&) = delete;
  std::byte* bytes;
  std::size_t size;
};

}  // namespace kvtier::test_util

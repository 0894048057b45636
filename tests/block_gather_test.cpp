// Block gather/scatter (kernels/block_gather.h) against per-block memcpy,
// with absent (null) blocks skipped in both directions.
#include "kernels/block_gather.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace kvtier::kernels {
namespace {

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<unsigned char, Free>;

Bytes aligned_bytes(std::size_t n, unsigned char fill) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  Bytes b(static_cast<unsigned char*>(std::aligned_alloc(64, (n + 63) / 64 * 64)));
  std::memset(b.get(), fill, n);
  return b;
}

void fill_pattern(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 131 + seed * 17 + 7);
}

TEST(BlockGather, GatherThenScatterRoundTrips) {
  for (std::size_t bytes : {16ul, 4096ul, 65536ul + 48}) {
    const int n = 5;
    std::vector<Bytes> blocks, back;
    std::vector<const void*> src;
    std::vector<void*> dst;
    for (int i = 0; i < n; ++i) {
      blocks.push_back(aligned_bytes(bytes, 0));
      fill_pattern(blocks.back().get(), bytes, i);
      src.push_back(blocks.back().get());
      back.push_back(aligned_bytes(bytes, 0xEE));
      dst.push_back(back.back().get());
    }
    Bytes staging = aligned_bytes(n * bytes + 64, 0xAB);
    block_gather(staging.get(), src.data(), n, bytes);
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(std::memcmp(staging.get() + i * bytes, blocks[i].get(), bytes), 0) << i;
    EXPECT_EQ(staging.get()[n * bytes], 0xAB) << "wrote past the staging range";
    block_scatter(dst.data(), staging.get(), n, bytes);
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(std::memcmp(back[i].get(), blocks[i].get(), bytes), 0) << i;
  }
}

TEST(BlockGather, NullBlocksAreSkipped) {
  const std::size_t bytes = 256;
  Bytes a = aligned_bytes(bytes, 0), c = aligned_bytes(bytes, 0);
  fill_pattern(a.get(), bytes, 1);
  fill_pattern(c.get(), bytes, 3);
  const void* src[3] = {a.get(), nullptr, c.get()};
  Bytes staging = aligned_bytes(3 * bytes, 0x5A);
  block_gather(staging.get(), src, 3, bytes);
  EXPECT_EQ(std::memcmp(staging.get(), a.get(), bytes), 0);
  for (std::size_t i = 0; i < bytes; ++i)
    ASSERT_EQ(staging.get()[bytes + i], 0x5A) << "slot 1 touched";
  EXPECT_EQ(std::memcmp(staging.get() + 2 * bytes, c.get(), bytes), 0);

  Bytes x = aligned_bytes(bytes, 0x11), z = aligned_bytes(bytes, 0x33);
  void* dst[3] = {x.get(), nullptr, z.get()};
  block_scatter(dst, staging.get(), 3, bytes);
  EXPECT_EQ(std::memcmp(x.get(), a.get(), bytes), 0);
  EXPECT_EQ(std::memcmp(z.get(), c.get(), bytes), 0);
}

TEST(BlockGather, NoBlocksIsANoOp) {
  unsigned char staging[16] = {};
  block_gather(staging, nullptr, 0, 16);
  block_scatter(nullptr, staging, 0, 16);
  for (unsigned char b : staging) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace kvtier::kernels

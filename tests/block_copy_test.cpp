// The streaming block copy against its reference (memcpy), on block sizes
// of the bundled model and of GPT-2, and without touching bytes past the end.
#include "kernels/block_copy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace kvtier::kernels {
namespace {

struct Free {
  void operator()(void* p) const { std::free(p); }
};

TEST(BlockCopyTest, EqualsMemcpyByteForByte) {
  for (std::size_t bytes : {64ul, 4096ul, 65536ul, 1179648ul}) {
    const std::size_t total = bytes + 64;  // a guard line after the block
    std::unique_ptr<unsigned char, Free> src(
        static_cast<unsigned char*>(std::aligned_alloc(64, total)));
    std::unique_ptr<unsigned char, Free> fast(
        static_cast<unsigned char*>(std::aligned_alloc(64, total)));
    std::unique_ptr<unsigned char, Free> ref(
        static_cast<unsigned char*>(std::aligned_alloc(64, total)));
    for (std::size_t i = 0; i < total; ++i) src.get()[i] = static_cast<unsigned char>(i * 131 + 7);
    std::memset(fast.get(), 0xAB, total);
    std::memset(ref.get(), 0xAB, total);
    copy_block(fast.get(), src.get(), bytes);
    copy_block_reference(ref.get(), src.get(), bytes);
    EXPECT_EQ(std::memcmp(fast.get(), ref.get(), total), 0) << bytes << " bytes";
    EXPECT_EQ(fast.get()[bytes], 0xAB) << "wrote past the block";
  }
}

}  // namespace
}  // namespace kvtier::kernels

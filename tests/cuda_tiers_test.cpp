// The CUDA tiers: block pools over cudaMalloc (L1) and cudaHostAlloc (L2)
// memory, and block copies between them through CudaCopyStream, checked
// byte for byte and ticket by ticket. Built only with the CUDA side; on a
// machine without a device the device tests are skipped with the reason, and
// one test checks that everything fails there with a message, not a crash.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/cuda_test_util.h"
#include "tiers/block_pool.h"
#include "tiers/cuda/cuda_copy_stream.h"
#include "tiers/cuda/cuda_memory.h"

namespace kvtier::tiers {
namespace {

using CudaTiers = cuda_test_util::CudaDeviceTest;

constexpr std::size_t kBlockBytes = 64 * 1024;
constexpr int kBlocks = 24;

std::byte pattern(int block, std::size_t i) {
  return static_cast<std::byte>((i * 131 + (i >> 9) + static_cast<std::size_t>(block) * 17) & 0xFF);
}

void fill(std::byte* p, int block) {
  for (std::size_t i = 0; i < kBlockBytes; ++i) p[i] = pattern(block, i);
}

// Polls until `n` completions have come, or 10 s have passed.
std::vector<CopyCompletion> poll_for(CudaCopyStream& stream, std::size_t n) {
  std::vector<CopyCompletion> all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (all.size() < n && std::chrono::steady_clock::now() < deadline) {
    auto done = stream.poll();
    EXPECT_TRUE(done.has_value()) << done.error();
    if (!done) break;
    all.insert(all.end(), done->begin(), done->end());
    if (done->empty()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return all;
}

TEST(CudaTiersNoDevice, RegionsAndStreamsFailWithTheReasonWithoutADevice) {
  if (kernels::cuda_device_present()) GTEST_SKIP() << "a CUDA device is present";
  auto device = cuda_device_region(4096);
  ASSERT_FALSE(device.has_value());
  EXPECT_NE(device.error().find("cudaMalloc of 4096 bytes failed: "), std::string::npos)
      << device.error();
  auto pinned = cuda_pinned_region(4096);
  ASSERT_FALSE(pinned.has_value());
  EXPECT_NE(pinned.error().find("cudaHostAlloc of 4096 bytes failed: "), std::string::npos)
      << pinned.error();
  auto stream = CudaCopyStream::create();
  ASSERT_FALSE(stream.has_value());
  EXPECT_NE(stream.error().find("cudaStreamCreateWithFlags failed: "), std::string::npos)
      << stream.error();
}

TEST_F(CudaTiers, PoolsLieOverDeviceAndPinnedMemory) {
  auto device = cuda_device_region(kBlockBytes * kBlocks);
  ASSERT_TRUE(device.has_value()) << device.error();
  auto pinned = cuda_pinned_region(kBlockBytes * kBlocks);
  ASSERT_TRUE(pinned.has_value()) << pinned.error();
  BlockPool l1(kBlockBytes, kBlocks, std::move(*device));
  BlockPool l2(kBlockBytes, kBlocks, std::move(*pinned));
  EXPECT_EQ(l1.memory(), Memory::kExternal);
  EXPECT_EQ(l2.memory(), Memory::kExternal);
  for (int id : {0, kBlocks - 1}) {
    cudaPointerAttributes a{};
    CUDA_OK(cudaPointerGetAttributes(&a, l1.data(id)));
    EXPECT_EQ(a.type, cudaMemoryTypeDevice) << "L1 block " << id;
    CUDA_OK(cudaPointerGetAttributes(&a, l2.data(id)));
    EXPECT_EQ(a.type, cudaMemoryTypeHost) << "L2 block " << id;
  }
  // The host may write pinned blocks directly.
  const int id = *l2.allocate();
  fill(l2.data(id), id);
  EXPECT_EQ(l2.data(id)[kBlockBytes - 1], pattern(id, kBlockBytes - 1));
  EXPECT_EQ(cuda_device_region(0).has_value(), false);
}

// A pool over cuda_device_region offers its link: pinned host memory the
// copy queue accepts (pageable memory it refuses), and a queue that carries a
// block to it and back, waking its owner.
TEST_F(CudaTiers, TheDeviceRegionsLinkOffersPinnedMemoryAndACopyQueue) {
  auto device = cuda_device_region(kBlockBytes);
  ASSERT_TRUE(device.has_value()) << device.error();
  BlockPool l1(kBlockBytes, 1, std::move(*device));
  ASSERT_NE(l1.link(), nullptr);
  auto host = l1.link()->host_memory(2 * kBlockBytes);
  ASSERT_TRUE(host.has_value()) << host.error();
  BlockPool l2(kBlockBytes, 2, std::move(*host));
  EXPECT_TRUE(l2.host_addressable());
  EXPECT_EQ(l2.link(), nullptr);
  cudaPointerAttributes a{};
  CUDA_OK(cudaPointerGetAttributes(&a, l2.data(1)));
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  std::atomic<int> woken = 0;
  auto queue = l1.link()->copy_queue([&] { woken.fetch_add(1); });
  ASSERT_TRUE(queue.has_value()) << queue.error();
  fill(l2.data(0), 7);
  auto up = (*queue)->copy(l1.data(0), l2.data(0), kBlockBytes);
  ASSERT_TRUE(up.has_value()) << up.error();
  auto down = (*queue)->copy(l2.data(1), l1.data(0), kBlockBytes);
  ASSERT_TRUE(down.has_value()) << down.error();
  ASSERT_TRUE((*queue)->notify().has_value());  // one wake-up for both
  ASSERT_TRUE((*queue)->drain().has_value());
  auto done = (*queue)->poll();
  ASSERT_TRUE(done.has_value()) << done.error();
  ASSERT_EQ(done->size(), 2u);
  EXPECT_EQ((*done)[0].ticket, *up);
  EXPECT_EQ((*done)[1].ticket, *down);
  EXPECT_EQ(std::memcmp(l2.data(0), l2.data(1), kBlockBytes), 0);
  EXPECT_EQ(woken.load(), 1);
  std::vector<std::byte> pageable(kBlockBytes);
  EXPECT_FALSE((*queue)->copy(l1.data(0), pageable.data(), kBlockBytes).has_value());
}

// Every block up to L1 and back down into other L2 blocks, all copies in
// flight at once: tickets come back once each, in submission order, and the
// bytes come back unchanged; on_complete runs once per notify(), not per copy.
TEST_F(CudaTiers, CopiesUpAndBackDownInTicketOrder) {
  auto device = cuda_device_region(kBlockBytes * kBlocks);
  ASSERT_TRUE(device.has_value()) << device.error();
  auto pinned = cuda_pinned_region(kBlockBytes * kBlocks * 2);
  ASSERT_TRUE(pinned.has_value()) << pinned.error();
  BlockPool l1(kBlockBytes, kBlocks, std::move(*device));
  BlockPool l2(kBlockBytes, kBlocks * 2, std::move(*pinned));
  std::atomic<int> woken{0};
  auto stream = CudaCopyStream::create([&] { woken.fetch_add(1); });
  ASSERT_TRUE(stream.has_value()) << stream.error();

  std::vector<int> src, dev, back;
  for (int b = 0; b < kBlocks; ++b) {
    src.push_back(*l2.allocate());
    back.push_back(*l2.allocate());
    dev.push_back(*l1.allocate());
    fill(l2.data(src[b]), b);
    std::memset(l2.data(back[b]), 0xEE, kBlockBytes);
  }
  std::vector<std::uint64_t> tickets;
  for (int b = 0; b < kBlocks; ++b) {
    auto up = (*stream)->copy(l1.data(dev[b]), l2.data(src[b]), kBlockBytes);
    ASSERT_TRUE(up.has_value()) << up.error();
    tickets.push_back(*up);
  }
  ASSERT_TRUE((*stream)->notify().has_value());
  for (int b = 0; b < kBlocks; ++b) {
    auto down = (*stream)->copy(l2.data(back[b]), l1.data(dev[b]), kBlockBytes);
    ASSERT_TRUE(down.has_value()) << down.error();
    tickets.push_back(*down);
  }
  ASSERT_TRUE((*stream)->notify().has_value());
  for (std::size_t i = 1; i < tickets.size(); ++i) EXPECT_EQ(tickets[i], tickets[i - 1] + 1);

  const auto done = poll_for(**stream, tickets.size());
  ASSERT_EQ(done.size(), tickets.size());
  for (std::size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].ticket, tickets[i]) << "completion " << i;
    EXPECT_GT(done[i].latency.count(), 0) << "completion " << i;
  }
  EXPECT_EQ((*stream)->in_flight(), 0u);
  for (int b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(std::memcmp(l2.data(back[b]), l2.data(src[b]), kBlockBytes), 0) << "block " << b;
  }
  // The host functions run after their events: drain() waits for them too.
  ASSERT_TRUE((*stream)->drain().has_value());
  EXPECT_EQ(woken.load(), 2);
  CUDA_OK(cudaGetLastError());
}

// drain() returns once every copy has ended; poll() then has them all. Round
// after round, the events the first round made are reused.
TEST_F(CudaTiers, DrainWaitsForEveryCopyRoundAfterRound) {
  constexpr std::size_t kBig = 4 << 20;
  constexpr int kCopies = 8;
  auto device = cuda_device_region(kBig * kCopies);
  ASSERT_TRUE(device.has_value()) << device.error();
  auto pinned = cuda_pinned_region(kBig * kCopies);
  ASSERT_TRUE(pinned.has_value()) << pinned.error();
  BlockPool l1(kBig, kCopies, std::move(*device));
  BlockPool l2(kBig, kCopies, std::move(*pinned));
  auto stream = CudaCopyStream::create();
  ASSERT_TRUE(stream.has_value()) << stream.error();
  ASSERT_TRUE((*stream)->drain().has_value());  // nothing in flight: returns at once

  std::uint64_t expected_ticket = 1;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < kCopies; ++b) std::memset(l2.data(b), round * 16 + b, kBig);
    for (int b = 0; b < kCopies; ++b) {
      auto t = (*stream)->copy(l1.data(b), l2.data(b), kBig);
      ASSERT_TRUE(t.has_value()) << t.error();
    }
    for (int b = 0; b < kCopies; ++b) {
      auto t = (*stream)->copy(l2.data(b), l1.data((b + 1) % kCopies), kBig);
      ASSERT_TRUE(t.has_value()) << t.error();
    }
    EXPECT_EQ((*stream)->in_flight(), 2u * kCopies);
    const auto drained = (*stream)->drain();
    ASSERT_TRUE(drained.has_value()) << drained.error();
    EXPECT_EQ((*stream)->in_flight(), 2u * kCopies);  // until poll() returns them
    const auto done = (*stream)->poll();
    ASSERT_TRUE(done.has_value()) << done.error();
    ASSERT_EQ(done->size(), 2u * kCopies) << "round " << round;
    for (const CopyCompletion& c : *done) EXPECT_EQ(c.ticket, expected_ticket++);
    EXPECT_EQ((*stream)->in_flight(), 0u);
    // Pinned block b now holds what was block b + 1.
    for (int b = 0; b < kCopies; ++b) {
      const auto want = static_cast<std::byte>(round * 16 + (b + 1) % kCopies);
      EXPECT_EQ(l2.data(b)[0], want) << "round " << round << " block " << b;
      EXPECT_EQ(l2.data(b)[kBig - 1], want) << "round " << round << " block " << b;
    }
  }
}

// Pageable host memory and pointers CUDA does not know are refused with the
// reason; a refused copy takes no ticket, leaves no CUDA error behind, and the
// stream goes on working.
TEST_F(CudaTiers, RefusedCopiesSayWhyAndTakeNoTicket) {
  auto device = cuda_device_region(kBlockBytes);
  ASSERT_TRUE(device.has_value()) << device.error();
  BlockPool l1(kBlockBytes, 1, std::move(*device));
  auto stream = CudaCopyStream::create();
  ASSERT_TRUE(stream.has_value()) << stream.error();
  std::vector<std::byte> pageable(kBlockBytes, std::byte{5});

  auto from_pageable = (*stream)->copy(l1.data(0), pageable.data(), kBlockBytes);
  ASSERT_FALSE(from_pageable.has_value());
  EXPECT_NE(from_pageable.error().find("source is not device, managed or page-locked"),
            std::string::npos)
      << from_pageable.error();
  auto to_null = (*stream)->copy(nullptr, l1.data(0), kBlockBytes);
  ASSERT_FALSE(to_null.has_value());
  EXPECT_NE(to_null.error().find("destination"), std::string::npos) << to_null.error();
  EXPECT_EQ((*stream)->in_flight(), 0u);
  CUDA_OK(cudaGetLastError());

  auto pinned = cuda_pinned_region(kBlockBytes);
  ASSERT_TRUE(pinned.has_value()) << pinned.error();
  BlockPool l2(kBlockBytes, 1, std::move(*pinned));
  fill(l2.data(0), 3);
  auto ok = (*stream)->copy(l1.data(0), l2.data(0), kBlockBytes);
  ASSERT_TRUE(ok.has_value()) << ok.error();
  EXPECT_EQ(*ok, 1u);
  const auto done = poll_for(**stream, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, 1u);
}

}  // namespace
}  // namespace kvtier::tiers

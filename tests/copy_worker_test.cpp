#include "tiers/copy_worker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <vector>

namespace kvtier::tiers {
namespace {

void plain_copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

std::vector<std::byte> pattern(std::size_t bytes, int seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return v;
}

TEST(CopyWorkerTest, EveryCopyLandsAndEachTicketComesBackOnce) {
  constexpr int kCopies = 64;
  constexpr std::size_t kBytes = 64 * 1024;
  std::atomic<int> wakeups{0};
  CopyWorker worker(plain_copy, [&] { ++wakeups; });
  std::vector<std::vector<std::byte>> src, dst;
  std::set<std::uint64_t> tickets;
  for (int i = 0; i < kCopies; ++i) {
    src.push_back(pattern(kBytes, i));
    dst.emplace_back(kBytes);
  }
  for (int i = 0; i < kCopies; ++i)
    tickets.insert(worker.copy(dst[i].data(), src[i].data(), kBytes));
  EXPECT_EQ(tickets.size(), static_cast<std::size_t>(kCopies));
  EXPECT_EQ(worker.in_flight(), static_cast<std::size_t>(kCopies));

  worker.drain();
  std::set<std::uint64_t> returned;
  for (const CopyCompletion& c : worker.poll()) {
    EXPECT_TRUE(returned.insert(c.ticket).second) << "ticket " << c.ticket << " twice";
    EXPECT_GT(c.latency.count(), 0);
  }
  EXPECT_EQ(returned, tickets);
  EXPECT_EQ(worker.in_flight(), 0u);
  EXPECT_TRUE(worker.poll().empty());
  for (int i = 0; i < kCopies; ++i) EXPECT_EQ(dst[i], src[i]) << "copy " << i;
  // The hook runs after each completion is queued; the last may still be on
  // its way out of the worker when drain() returns.
  worker.drain();
  EXPECT_GE(wakeups.load(), 1);
  EXPECT_LE(wakeups.load(), kCopies);
}

TEST(CopyWorkerTest, CopiesRunInSubmissionOrder) {
  // Two copies into the same destination: the second one's bytes must win.
  constexpr std::size_t kBytes = 1 << 20;
  const auto first = pattern(kBytes, 1), second = pattern(kBytes, 2);
  std::vector<std::byte> dst(kBytes);
  CopyWorker worker(plain_copy);
  worker.copy(dst.data(), first.data(), kBytes);
  worker.copy(dst.data(), second.data(), kBytes);
  worker.drain();
  EXPECT_EQ(worker.poll().size(), 2u);
  EXPECT_EQ(dst, second);
}

TEST(CopyWorkerTest, DestructionFinishesQueuedCopies) {
  constexpr int kCopies = 32;
  constexpr std::size_t kBytes = 256 * 1024;
  const auto src = pattern(kBytes, 3);
  std::vector<std::vector<std::byte>> dst(kCopies, std::vector<std::byte>(kBytes));
  {
    CopyWorker worker(plain_copy);
    for (auto& d : dst) worker.copy(d.data(), src.data(), kBytes);
  }
  for (const auto& d : dst) EXPECT_EQ(d, src);
}

}  // namespace
}  // namespace kvtier::tiers

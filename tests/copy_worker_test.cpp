#include "tiers/copy_worker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>
#include <vector>

namespace kvtier::tiers {
namespace {

// A plain copy of `bytes`, as the engine's exact L2 uses (with copy_block).
CopyWorker::Transfer plain_copy(std::size_t bytes) {
  return [bytes](std::byte* dst, const std::byte* src) { std::memcpy(dst, src, bytes); };
}

std::vector<std::byte> pattern(std::size_t bytes, int seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return v;
}

TEST(CopyWorkerTest, EveryCopyLandsAndEachTicketComesBackOnce) {
  constexpr int kCopies = 64;
  constexpr std::size_t kBytes = 64 * 1024;
  std::atomic<int> wakeups{0};
  CopyWorker worker([&] { ++wakeups; });
  const CopyWorker::Transfer copy = plain_copy(kBytes);
  std::vector<std::vector<std::byte>> src, dst;
  std::set<std::uint64_t> tickets;
  for (int i = 0; i < kCopies; ++i) {
    src.push_back(pattern(kBytes, i));
    dst.emplace_back(kBytes);
  }
  for (int i = 0; i < kCopies; ++i) tickets.insert(worker.copy(dst[i].data(), src[i].data(), copy));
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
  // Two copies into the same destination: the second one's bytes must win
  // (on the worker alone; help() may overlap them, see the header).
  constexpr std::size_t kBytes = 1 << 20;
  const auto first = pattern(kBytes, 1), second = pattern(kBytes, 2);
  std::vector<std::byte> dst(kBytes);
  const CopyWorker::Transfer copy = plain_copy(kBytes);
  CopyWorker worker;
  worker.copy(dst.data(), first.data(), copy);
  worker.copy(dst.data(), second.data(), copy);
  worker.drain();
  EXPECT_EQ(worker.poll().size(), 2u);
  EXPECT_EQ(dst, second);
}

TEST(CopyWorkerTest, DestructionFinishesQueuedCopies) {
  constexpr int kCopies = 32;
  constexpr std::size_t kBytes = 256 * 1024;
  const auto src = pattern(kBytes, 3);
  std::vector<std::vector<std::byte>> dst(kCopies, std::vector<std::byte>(kBytes));
  const CopyWorker::Transfer copy = plain_copy(kBytes);
  {
    CopyWorker worker;
    for (auto& d : dst) worker.copy(d.data(), src.data(), copy);
  }
  for (const auto& d : dst) EXPECT_EQ(d, src);
}

// Each move runs the Transfer it names, even when its sizes differ from the
// source's (as the engine's int8 encode and decode do): a shrinking
// transform, a plain copy and a growing one, interleaved.
TEST(CopyWorkerTest, EachMoveRunsItsOwnTransfer) {
  constexpr std::size_t kBytes = 4096;
  const CopyWorker::Transfer copy = plain_copy(kBytes);
  const CopyWorker::Transfer halve = [](std::byte* dst, const std::byte* src) {
    for (std::size_t i = 0; i < kBytes / 2; ++i) dst[i] = src[2 * i];
  };
  const CopyWorker::Transfer twice = [](std::byte* dst, const std::byte* src) {
    for (std::size_t i = 0; i < kBytes; ++i) dst[2 * i] = dst[2 * i + 1] = src[i];
  };
  const auto src = pattern(kBytes, 5);
  std::vector<std::byte> halved(kBytes / 2), copied(kBytes), doubled(2 * kBytes);
  CopyWorker worker;
  const std::uint64_t tickets[] = {worker.copy(halved.data(), src.data(), halve),
                                   worker.copy(copied.data(), src.data(), copy),
                                   worker.copy(doubled.data(), src.data(), twice)};
  worker.drain();
  std::set<std::uint64_t> returned;
  for (const CopyCompletion& c : worker.poll()) returned.insert(c.ticket);
  EXPECT_EQ(returned, std::set<std::uint64_t>(std::begin(tickets), std::end(tickets)));
  EXPECT_EQ(copied, src);
  for (std::size_t i = 0; i < kBytes / 2; ++i) ASSERT_EQ(halved[i], src[2 * i]) << i;
  for (std::size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(doubled[2 * i], src[i]) << i;
    ASSERT_EQ(doubled[2 * i + 1], src[i]) << i;
  }
}

// help() runs queued moves on the caller's thread while the worker is busy:
// the worker is held inside a first move until the caller has taken every
// other one.
TEST(CopyWorkerTest, HelpRunsQueuedCopiesOnTheCallersThread) {
  constexpr int kCopies = 16;
  constexpr std::size_t kBytes = 64 * 1024;
  std::atomic<bool> started{false}, release{false};
  const CopyWorker::Transfer hold = [&](std::byte*, const std::byte*) {
    started = true;
    while (!release) std::this_thread::yield();
  };
  std::vector<std::thread::id> ran_on(kCopies);
  std::vector<std::vector<std::byte>> src, dst;
  for (int i = 0; i < kCopies; ++i) {
    src.push_back(pattern(kBytes, i));
    dst.emplace_back(kBytes);
  }
  // Each move records its thread in the slot its destination names.
  const CopyWorker::Transfer copy = [&](std::byte* d, const std::byte* s) {
    for (int i = 0; i < kCopies; ++i)
      if (d == dst[i].data()) ran_on[i] = std::this_thread::get_id();
    std::memcpy(d, s, kBytes);
  };

  CopyWorker worker;
  std::set<std::uint64_t> tickets{worker.copy(nullptr, nullptr, hold)};
  while (!started) std::this_thread::yield();
  for (int i = 0; i < kCopies; ++i) tickets.insert(worker.copy(dst[i].data(), src[i].data(), copy));
  int helped = 0;
  while (worker.help()) ++helped;
  EXPECT_EQ(helped, kCopies);
  EXPECT_FALSE(worker.help());
  for (int i = 0; i < kCopies; ++i) {
    EXPECT_EQ(ran_on[i], std::this_thread::get_id()) << "copy " << i;
    EXPECT_EQ(dst[i], src[i]) << "copy " << i;
  }
  release = true;
  worker.drain();
  std::set<std::uint64_t> returned;
  for (const CopyCompletion& c : worker.poll()) EXPECT_TRUE(returned.insert(c.ticket).second);
  EXPECT_EQ(returned, tickets);
  EXPECT_EQ(worker.in_flight(), 0u);
}

}  // namespace
}  // namespace kvtier::tiers

// The block mover: moves on the worker and on a device's copy queue (the
// stand-in device's, a real CopyWorker behind the CopyQueue interface), the
// tickets of each, and what happens when the queue is lost.
#include "tiers/block_mover.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "stand_in_device.h"
#include "tiers/block_pool.h"
#include "tiers/wake_signal.h"

namespace kvtier::tiers {
namespace {

constexpr std::size_t kBytes = 4096;

CopyWorker::Transfer plain_copy() {
  return [](std::byte* dst, const std::byte* src) { std::memcpy(dst, src, kBytes); };
}

std::vector<std::byte> pattern(int seed) {
  std::vector<std::byte> v(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) v[i] = static_cast<std::byte>((i * 13 + seed) & 0xff);
  return v;
}

// Polls until every ticket in `want` has come back; returns them all.
// The moves wake `wake`.
std::set<std::uint64_t> collect(BlockMover& mover, WakeSignal& wake, std::size_t want) {
  std::set<std::uint64_t> got;
  while (got.size() < want) {
    for (const CopyCompletion& c : mover.poll()) EXPECT_TRUE(got.insert(c.ticket).second);
    if (got.size() < want) wake.sleep(std::chrono::milliseconds(5));
  }
  return got;
}

TEST(BlockMoverTest, WithoutAQueueMovesRunOnTheWorkerAndWakeTheOwner) {
  std::vector<std::string> losses;
  WakeSignal wake;
  BlockMover mover(wake.waker(), [&](const std::string& why) { losses.push_back(why); });
  EXPECT_FALSE(mover.has_queue());
  const CopyWorker::Transfer copy = plain_copy();
  const auto src = pattern(1);
  std::vector<std::byte> dst(kBytes);
  const std::uint64_t t = mover.start(dst.data(), src.data(), kBytes, copy);
  EXPECT_FALSE(BlockMover::on_queue(t));
  EXPECT_EQ(collect(mover, wake, 1), std::set<std::uint64_t>{t});
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(losses.empty());
}

TEST(BlockMoverTest, QueueTicketsNeverMeetTheWorkersAndEveryMoveLands) {
  test_util::StandInDevice device;
  WakeSignal wake;
  BlockMover mover(wake.waker(), {});
  // The link a device L1 offers (the pool owns the region and frees it).
  BlockPool l1(kBytes, 1, device.region(kBytes, /*with_link=*/true));
  mover.use_queue(l1.link()->copy_queue(wake.waker()).value());
  const CopyWorker::Transfer copy = plain_copy();
  std::vector<std::vector<std::byte>> src, dst;
  for (int i = 0; i < 8; ++i) {
    src.push_back(pattern(i));
    dst.emplace_back(kBytes);
  }
  std::set<std::uint64_t> started;
  for (int i = 0; i < 8; ++i) {
    const std::uint64_t t = mover.start(dst[i].data(), src[i].data(), kBytes, copy);
    EXPECT_TRUE(BlockMover::on_queue(t));
    EXPECT_TRUE(started.insert(t).second);
  }
  EXPECT_EQ(collect(mover, wake, 8), started);
  EXPECT_EQ(device.queued, 8);
  EXPECT_EQ(dst, src);
}

TEST(BlockMoverTest, ALostQueueIsSaidOnceAndItsMovesAreTheOwnersToFail) {
  test_util::StandInDevice device;
  device.lose_after = 2;
  std::vector<std::string> losses;
  WakeSignal wake;
  BlockMover mover(wake.waker(), [&](const std::string& why) { losses.push_back(why); });
  // The link a device L1 offers (the pool owns the region and frees it).
  BlockPool l1(kBytes, 1, device.region(kBytes, /*with_link=*/true));
  mover.use_queue(l1.link()->copy_queue(wake.waker()).value());
  const CopyWorker::Transfer copy = plain_copy();
  const auto src = pattern(3);
  std::vector<std::vector<std::byte>> dst(4, std::vector<std::byte>(kBytes));
  const std::uint64_t a = mover.start(dst[0].data(), src.data(), kBytes, copy);
  const std::uint64_t b = mover.start(dst[1].data(), src.data(), kBytes, copy);
  // The queue refuses the third copy: lost. Until the owner has failed the
  // lost moves, a new move is not made, and is the queue's.
  const std::uint64_t c = mover.start(dst[2].data(), src.data(), kBytes, copy);
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_NE(losses[0].find("stand-in device lost"), std::string::npos);
  EXPECT_FALSE(mover.has_queue());
  EXPECT_TRUE(mover.queue_lost());
  for (std::uint64_t t : {a, b, c}) EXPECT_TRUE(BlockMover::on_queue(t));
  EXPECT_EQ(std::set<std::uint64_t>({a, b, c}).size(), 3u);
  EXPECT_TRUE(mover.poll().empty());  // the lost queue's moves never complete
  EXPECT_NE(dst[2], src);
  mover.forget_lost_queue();
  // From then on the worker moves.
  const std::uint64_t d = mover.start(dst[3].data(), src.data(), kBytes, copy);
  EXPECT_FALSE(BlockMover::on_queue(d));
  EXPECT_EQ(collect(mover, wake, 1), std::set<std::uint64_t>{d});
  EXPECT_EQ(dst[3], src);
  EXPECT_EQ(losses.size(), 1u);
}

}  // namespace
}  // namespace kvtier::tiers

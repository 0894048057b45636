// L2's store: moves between its slots and L1 buffers as tickets, on the copy
// worker and on a device's copy queue (the stand-in device's), reads in
// parts, and a lost queue's moves completing failed, once each.
#include "tiers/l2_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "stand_in_device.h"
#include "tiers/wake_signal.h"

namespace kvtier::tiers {
namespace {

constexpr std::size_t kBytes = 4096;
constexpr int kSlots = 4;

std::vector<std::byte> pattern(int seed) {
  std::vector<std::byte> v(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) v[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  return v;
}

BlockKey key(std::uint64_t n) { return BlockKey{n, ~n}; }

class L2StoreTest : public ::testing::Test {
 protected:
  L2StoreTest()
      : l2_(std::make_unique<BlockPool>(kBytes, kSlots), wake_.waker(),
            [this](const std::string& why) { losses_.push_back(why); }) {}

  // Polls until `n` moves have completed; returns their completions.
  std::vector<StoreCompletion> complete(std::size_t n) {
    std::vector<StoreCompletion> got;
    while (got.size() < n) {
      for (const StoreCompletion& c : l2_.poll()) got.push_back(c);
      if (got.size() < n) wake_.sleep(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(l2_.in_flight(), 0u);
    return got;
  }

  // A whole-block copy, and a copy of a quarter block (a piece).
  const L2Store::Transfer whole_ = [](std::byte* d, const std::byte* s) {
    std::memcpy(d, s, kBytes);
  };
  const L2Store::Transfer quarter_ = [](std::byte* d, const std::byte* s) {
    std::memcpy(d, s, kBytes / 4);
  };
  WakeSignal wake_;
  std::vector<std::string> losses_;
  L2Store l2_;
};

TEST_F(L2StoreTest, MovesCompleteOnceAsTicketsWithTheirKeys) {
  const std::vector<std::byte> src = pattern(1);
  const int slot = *l2_.slots().allocate();
  const std::uint64_t w = l2_.write(key(1), slot, src.data(), kBytes, whole_);
  EXPECT_TRUE(l2_.pending(w));
  EXPECT_EQ(l2_.in_flight(), 1u);
  std::vector<StoreCompletion> done = complete(1);
  EXPECT_EQ(done[0].ticket, w);
  EXPECT_EQ(done[0].key, key(1));
  EXPECT_TRUE(done[0].is_write);
  EXPECT_EQ(done[0].status, StoreStatus::kOk);
  EXPECT_FALSE(l2_.pending(w));
  EXPECT_EQ(std::memcmp(l2_.slots().data(slot), src.data(), kBytes), 0);

  // Up again in four pieces: landed() only grows, and ends once all are in.
  std::vector<std::byte> dst(kBytes);
  const std::uint64_t r = l2_.read(key(1), slot, dst.data(), kBytes / 4, quarter_, 4);
  EXPECT_NE(r, w);
  int last = 0;
  for (auto landed = l2_.landed(r); landed; landed = l2_.landed(r)) {
    EXPECT_GE(*landed, last);
    EXPECT_LT(*landed, 4);
    last = *landed;
    wake_.sleep(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(l2_.pending(r)) << "completed, but not returned by poll() yet";
  done = complete(1);  // one completion for the four pieces
  EXPECT_EQ(done[0].ticket, r);
  EXPECT_FALSE(done[0].is_write);
  EXPECT_EQ(done[0].status, StoreStatus::kOk);
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(l2_.poll().empty());
  EXPECT_TRUE(losses_.empty());
}

// The worker runs moves in the order they were started, so the order its
// transfers run in is the order flush() started the pieces: piece 0 of
// every read before piece 1 of any.
TEST_F(L2StoreTest, ReadsInPartsStartPieceMajor) {
  std::mutex mu;
  std::vector<std::byte*> order;
  const L2Store::Transfer recorded = [&](std::byte* d, const std::byte* s) {
    std::memcpy(d, s, kBytes / 4);
    std::lock_guard lock(mu);
    order.push_back(d);
  };
  const int slot = *l2_.slots().allocate();
  std::vector<std::byte> a(kBytes), b(kBytes);
  l2_.read(key(1), slot, a.data(), kBytes / 4, recorded, 3);
  l2_.read(key(2), slot, b.data(), kBytes / 4, recorded, 2);
  l2_.flush();
  complete(2);
  const std::size_t q = kBytes / 4;
  const std::vector<std::byte*> want = {a.data(), b.data(), a.data() + q, b.data() + q,
                                        a.data() + 2 * q};
  std::lock_guard lock(mu);
  EXPECT_EQ(order, want);
}

// Pieces a read skips are not moved: their bytes in the destination stay as
// they were, and the completion says how many bytes stayed. A read that
// skips every piece completes at once.
TEST_F(L2StoreTest, ASkippedPieceIsNotMoved) {
  const std::vector<std::byte> src = pattern(4);
  const int slot = *l2_.slots().allocate();
  std::memcpy(l2_.slots().data(slot), src.data(), kBytes);
  std::vector<std::byte> dst(kBytes, std::byte{0xEE});
  const std::uint64_t r = l2_.read(key(1), slot, dst.data(), kBytes / 4, quarter_, 4, 0b0101);
  std::vector<StoreCompletion> done = complete(1);
  EXPECT_EQ(done[0].ticket, r);
  EXPECT_EQ(done[0].status, StoreStatus::kOk);
  EXPECT_EQ(done[0].skipped_bytes, kBytes / 2);
  const std::size_t q = kBytes / 4;
  for (int piece = 0; piece < 4; ++piece) {
    const std::byte* got = dst.data() + piece * q;
    if (piece % 2 == 0)
      EXPECT_TRUE(std::all_of(got, got + q, [](std::byte b) { return b == std::byte{0xEE}; }))
          << "piece " << piece << " was moved";
    else
      EXPECT_EQ(std::memcmp(got, src.data() + piece * q, q), 0) << "piece " << piece;
  }
  const std::uint64_t none = l2_.read(key(1), slot, dst.data(), kBytes / 4, quarter_, 4, 0b1111);
  EXPECT_FALSE(l2_.landed(none));
  done = l2_.poll();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, none);
  EXPECT_EQ(done[0].skipped_bytes, kBytes);
}

// On a device queue, flush() asks for a wake-up behind each round of pieces
// it starts; start() starts them the same way and asks for none.
TEST_F(L2StoreTest, StartStartsMovesOnTheQueueWithNoWakeUp) {
  test_util::StandInDevice device;
  BlockPool l1(kBytes, 2, device.region(2 * kBytes, /*with_link=*/true));
  l2_.use_queue(l1.link()->copy_queue(wake_.waker()).value());
  const std::vector<std::byte> src = pattern(3);
  l2_.write(key(1), 0, src.data(), kBytes, whole_);
  l2_.write(key(2), 1, src.data(), kBytes, whole_);
  l2_.start();
  EXPECT_EQ(device.queued, 2);
  EXPECT_EQ(device.notifies, 0);
  std::vector<std::byte> dst(kBytes);
  l2_.read(key(1), 0, dst.data(), kBytes / 4, quarter_, 4);
  l2_.flush();
  EXPECT_EQ(device.queued, 6);
  EXPECT_EQ(device.notifies, 4) << "one a round of pieces";
  l2_.drain();
  EXPECT_EQ(complete(3).size(), 3u);
  EXPECT_EQ(device.notifies, 4) << "drain() started nothing, so asked for nothing";
  EXPECT_EQ(dst, src);
}

// A queue lost with moves in flight (the stand-in queue takes two copies,
// then refuses): every move that had a piece on it completes kIoError, once,
// and what comes after runs on the worker.
TEST_F(L2StoreTest, ALostQueuesMovesCompleteFailedAndTheWorkerTakesOver) {
  test_util::StandInDevice device;
  device.lose_after = 2;
  // The link a device L1 offers (the pool owns the region and frees it).
  BlockPool l1(kBytes, 2, device.region(2 * kBytes, /*with_link=*/true));
  l2_.use_queue(l1.link()->copy_queue(wake_.waker()).value());
  const std::vector<std::byte> src = pattern(2);
  std::memcpy(l2_.slots().data(0), src.data(), kBytes);  // the slots are host memory
  std::vector<std::byte> dst(kBytes);
  const std::uint64_t r = l2_.read(key(1), 0, dst.data(), kBytes / 4, quarter_, 4);
  const std::uint64_t w = l2_.write(key(2), 1, src.data(), kBytes, whole_);
  l2_.flush();
  ASSERT_EQ(losses_.size(), 1u);
  EXPECT_NE(losses_[0].find("stand-in device lost"), std::string::npos);
  EXPECT_EQ(l2_.landed(r), std::nullopt) << "a failed read is over";
  std::vector<StoreCompletion> done = complete(2);
  ASSERT_EQ(done.size(), 2u);
  for (const StoreCompletion& c : done) {
    EXPECT_TRUE(c.ticket == r || c.ticket == w);
    EXPECT_EQ(c.status, StoreStatus::kIoError);
  }
  EXPECT_NE(done[0].ticket, done[1].ticket);

  const std::uint64_t again = l2_.read(key(1), 0, dst.data(), kBytes, whole_);
  done = complete(1);
  EXPECT_EQ(done[0].ticket, again);
  EXPECT_EQ(done[0].status, StoreStatus::kOk);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(device.queued, 2);
  EXPECT_EQ(losses_.size(), 1u);
}

}  // namespace
}  // namespace kvtier::tiers

// router/block_index.cpp: a daemon's cache.subscribe snapshot and events,
// replayed, and what they say of a prompt's blocks.
#include "router/block_index.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::router {
namespace {

using nlohmann::json;

tiers::BlockKey key(std::uint64_t n) { return {n, n * 7}; }
std::string hex(std::uint64_t n) { return tiers::to_hex(key(n)); }

json snapshot(std::uint64_t seq, json blocks) {
  return {{"seq", seq},
          {"fingerprint", "00000000deadbeef"},
          {"page_size", 16},
          {"blocks", std::move(blocks)}};
}

json batch(std::uint64_t seq, json events) { return {{"seq", seq}, {"events", std::move(events)}}; }

json event(std::uint64_t n, const char* tier, bool stored) {
  return {{"block", hex(n)}, {"tier", tier}, {"stored", stored}};
}

TEST(BlockIndexTest, SnapshotAndEventsGiveTheLeadingRunByFastestTier) {
  BlockIndex index;
  EXPECT_TRUE(index.stale());
  ASSERT_TRUE(index.reset(snapshot(5, {{{"block", hex(1)}, {"tier", "l1"}},
                                       {{"block", hex(1)}, {"tier", "l3"}},
                                       {{"block", hex(2)}, {"tier", "l2"}}})));
  EXPECT_FALSE(index.stale());
  EXPECT_EQ(index.fingerprint(), 0xdeadbeefULL);
  EXPECT_EQ(index.page_size(), 16);
  EXPECT_EQ(index.blocks()[Tier::kL1], 1);
  EXPECT_EQ(index.blocks()[Tier::kL3], 1);

  const std::vector<tiers::BlockKey> prompt = {key(1), key(2), key(3), key(4)};
  PrefixMatch m = index.match(prompt);
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.by_tier[Tier::kL1], 1);  // block 1: L1 beats its L3 copy
  EXPECT_EQ(m.by_tier[Tier::kL2], 1);

  // Block 3 arrives in L1, block 1 moves from L1 to L2, and 4 is stored
  // after a hole (block 3 counts; 4 follows it, so the run is 4 long).
  ASSERT_TRUE(index.apply(batch(6, {event(3, "l1", true), event(1, "l1", false),
                                    event(1, "l2", true), event(4, "remote", true)})));
  m = index.match(prompt);
  EXPECT_EQ(m.blocks, 4);
  EXPECT_EQ(m.by_tier[Tier::kL1], 1);
  EXPECT_EQ(m.by_tier[Tier::kL2], 2);
  EXPECT_EQ(m.by_tier[Tier::kRemote], 1);

  // Block 2 leaves: the run stops before it; dropping what is not there
  // changes nothing.
  ASSERT_TRUE(index.apply(batch(7, {event(2, "l2", false), event(9, "l1", false)})));
  EXPECT_EQ(index.match(prompt).blocks, 1);
  EXPECT_EQ(index.blocks()[Tier::kL2], 1);
  EXPECT_EQ(index.seq(), 7u);
}

TEST(BlockIndexTest, LostEventsMakeItStaleAndMalformedOnesChangeNothing) {
  BlockIndex index;
  ASSERT_TRUE(index.reset(snapshot(1, {{{"block", hex(1)}, {"tier", "l1"}}})));
  const std::vector<tiers::BlockKey> prompt = {key(1)};

  // Malformed: refused whole, the index as it was.
  for (const json& bad : {json(5), batch(2, json::object()), batch(2, {{{"block", hex(1)}}}),
                          batch(2, {event(1, "l9", false)}),
                          batch(2, {{{"block", "xyz"}, {"tier", "l1"}, {"stored", false}}}),
                          batch(2, {{{"block", hex(1)}, {"tier", "l1"}, {"stored", 0}}}),
                          json{{"seq", -1}, {"events", json::array()}}}) {
    EXPECT_FALSE(index.apply(bad)) << bad.dump();
    EXPECT_EQ(index.match(prompt).blocks, 1) << bad.dump();
    EXPECT_FALSE(index.stale());
  }
  // A repeat, or a gap: events were lost, so nothing is matched any more.
  EXPECT_FALSE(index.apply(batch(1, json::array())));
  EXPECT_TRUE(index.stale());
  EXPECT_EQ(index.match(prompt).blocks, 0);
  EXPECT_FALSE(index.apply(batch(2, json::array())));  // still stale: needs a snapshot

  ASSERT_TRUE(index.reset(snapshot(10, {{{"block", hex(1)}, {"tier", "l2"}}})));
  EXPECT_FALSE(index.apply(batch(12, json::array())));
  EXPECT_TRUE(index.stale());

  // A bad snapshot changes nothing either.
  ASSERT_TRUE(index.reset(snapshot(20, json::array())));
  for (json bad : {snapshot(21, {{{"block", hex(1)}, {"tier", "l0"}}}),
                   json{{"seq", 1}, {"page_size", 16}, {"blocks", json::array()}}}) {
    EXPECT_FALSE(index.reset(bad)) << bad.dump();
  }
  json no_hex = snapshot(3, json::array());
  no_hex["fingerprint"] = "00000000deadbeeg";
  EXPECT_FALSE(index.reset(no_hex));
  json no_page = snapshot(3, json::array());
  no_page["page_size"] = 0;
  EXPECT_FALSE(index.reset(no_page));
  EXPECT_FALSE(index.stale());
  EXPECT_EQ(index.seq(), 20u);
}

}  // namespace
}  // namespace kvtier::router

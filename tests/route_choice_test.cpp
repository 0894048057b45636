// router/route_choice.cpp: the expected cost of each daemon, and the choice.
#include "router/route_choice.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::router {
namespace {

using nlohmann::json;

// 100 us a pass of up to 16 rows, 1000 us one of 256; L3 loads cost 500 us
// plus 10 a block, remote ones 5000 us plus 100.
CostFigures costs() {
  auto f = CostFigures::parse(
      {{"prefill", {{{"rows", 256}, {"pass_us", 1000.0}}, {{"rows", 16}, {"pass_us", 100.0}}}},
       {"l2_latency_us", 0},
       {"l2_per_block_us", 5},
       {"l3_latency_us", 500},
       {"l3_per_block_us", 10},
       {"remote_latency_us", 5000},
       {"remote_per_block_us", 100}});
  EXPECT_TRUE(f) << f.error();
  return *f;
}

PrefixMatch held(Tier tier, int blocks) {
  PrefixMatch m;
  m.blocks = blocks;
  m.by_tier[tier] = blocks;
  return m;
}

TEST(RouteChoiceTest, CostFiguresInterpolateAndRefuseNonsense) {
  const CostFigures f = costs();
  EXPECT_DOUBLE_EQ(f.prefill_us(16), 100);
  EXPECT_DOUBLE_EQ(f.prefill_us(8), 50);
  EXPECT_DOUBLE_EQ(f.prefill_us(136), 550);
  EXPECT_DOUBLE_EQ(f.prefill_us(512), 2000);
  EXPECT_DOUBLE_EQ(f.prefill_us(0), 0);
  EXPECT_DOUBLE_EQ(f.latency_us[Tier::kL3], 500);
  EXPECT_DOUBLE_EQ(f.per_block_us[Tier::kRemote], 100);
  EXPECT_FALSE(CostFigures::parse(json::array()));
  EXPECT_FALSE(CostFigures::parse({{"prefill", {{{"rows", 0}, {"pass_us", 1}}}}}));
  EXPECT_FALSE(CostFigures::parse({{"prefill", {{{"rows", 16}, {"pass_us", -1}}}}}));
  EXPECT_FALSE(CostFigures::parse({{"prefill", json::array()}, {"l3_latency_us", -5}}));
  EXPECT_FALSE(CostFigures::parse({{"prefill", json::array()}, {"l3_latency_us", "5"}}));
}

TEST(RouteChoiceTest, TheDaemonHoldingThePrefixInTheFastestTierWins) {
  const CostFigures f = costs();
  // 256 tokens, 16 a block: 15 full blocks count.
  std::vector<Candidate> c = {
      {held(Tier::kL3, 15), 0, &f, 3}, {held(Tier::kL1, 15), 0, &f, 1}, {PrefixMatch{}, 0, &f, 2}};
  auto choice = choose(c, 256, 16);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->index, 1);
  EXPECT_EQ(choice->reason, Reason::kPrefix);
  EXPECT_DOUBLE_EQ(choice->expected_us, 100);  // the last 16 rows
  // L3: 500 + 150 to load, then 16 rows: cheaper than 1000 to recompute.
  EXPECT_DOUBLE_EQ(expected_us(c[0], 256, 16), 750);
  // A remote copy costs more than recomputing: counted as recomputing.
  EXPECT_DOUBLE_EQ(expected_us({held(Tier::kRemote, 15), 0, &f, 0}, 256, 16), 1000);
}

TEST(RouteChoiceTest, LoadOutweighsAPrefixOnlyWhenItCostsMore) {
  const CostFigures f = costs();
  // The holder's passes hold 48 rows before the request's last 16: one
  // 64-row pass, 280 us, against 1000 us for the idle daemon to recompute.
  std::vector<Candidate> c = {{held(Tier::kL1, 15), 48, &f, 1}, {PrefixMatch{}, 0, &f, 2}};
  EXPECT_EQ(choose(c, 256, 16)->index, 0);
  EXPECT_DOUBLE_EQ(expected_us(c[0], 256, 16), 280);
  // With 400 rows ahead (a 416-row pass, 1625 us) the idle daemon is sooner.
  c[0].backlog_rows = 400;
  auto choice = choose(c, 256, 16);
  EXPECT_EQ(choice->index, 1);
  EXPECT_EQ(choice->reason, Reason::kLoad);
}

TEST(RouteChoiceTest, ABacklogIsPrefilledBesideTheNewRowsNotBeforeThem) {
  const CostFigures f = costs();
  // 240 rows ahead and a 16-row prompt: one 256-row pass (1000 us), not a
  // 240-row pass and then a 16-row one (1040 us).
  EXPECT_DOUBLE_EQ(expected_us({PrefixMatch{}, 240, &f, 0}, 16, 16), 1000);
  // A new document goes to the daemon with less ahead of it, however the
  // rendezvous scores fall.
  std::vector<Candidate> c = {{PrefixMatch{}, 200, &f, 9}, {PrefixMatch{}, 16, &f, 1}};
  EXPECT_EQ(choose(c, 200, 16)->index, 1);
}

TEST(RouteChoiceTest, AKindsCurveIsTheMedianOfWhatEachMeasured) {
  const CostFigures f = costs();  // 16 rows 100 us, 256 rows 1000 us
  CostFigures fast = f, slow = f, none;
  for (auto& [rows, us] : fast.prefill) us /= 2;
  for (auto& [rows, us] : slow.prefill) us *= 11;
  slow.prefill.emplace(slow.prefill.begin(), 4, 100.0);  // a point only it has
  const std::vector<const CostFigures*> kind = {&fast, &slow, &f, &none};
  const auto curve = median_curve(kind);
  // At 4 rows: fast 12.5, f 25, slow 100: 25. At 16: 50, 100, 1100. At 256:
  // 500, 1000, 11000. A daemon with no curve yet says nothing.
  ASSERT_EQ(curve.size(), 3u);
  EXPECT_EQ(curve[0], (std::pair<int, double>{4, 25}));
  EXPECT_EQ(curve[1], (std::pair<int, double>{16, 100}));
  EXPECT_EQ(curve[2], (std::pair<int, double>{256, 1000}));
  // Two: the mean of both. None: no curve.
  const std::vector<const CostFigures*> two = {&fast, &f};
  EXPECT_DOUBLE_EQ(median_curve(two)[0].second, 75);
  const std::vector<const CostFigures*> empty = {&none};
  EXPECT_TRUE(median_curve(empty).empty());
}

TEST(RouteChoiceTest, ColdPromptsGoWhereTheirRendezvousScoreSaysWhateverTheOrder) {
  const CostFigures f = costs();
  std::vector<Candidate> c = {{PrefixMatch{}, 0, &f, rendezvous_score(42, "/a.sock")},
                              {PrefixMatch{}, 0, &f, rendezvous_score(42, "/b.sock")},
                              {PrefixMatch{}, 0, &f, rendezvous_score(42, "/c.sock")}};
  const auto first = choose(c, 100, 16);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->reason, Reason::kCold);
  const std::uint64_t winner = c[first->index].rendezvous;
  std::reverse(c.begin(), c.end());
  EXPECT_EQ(c[choose(c, 100, 16)->index].rendezvous, winner);
  // Other prompts spread: over 64 affinities each daemon wins some.
  int wins[3] = {};
  for (std::uint64_t a = 0; a < 64; ++a) {
    std::vector<Candidate> d;
    for (const char* addr : {"/a.sock", "/b.sock", "/c.sock"})
      d.push_back({PrefixMatch{}, 0, &f, rendezvous_score(a, addr)});
    ++wins[choose(d, 100, 16)->index];
  }
  for (int w : wins) EXPECT_GT(w, 0);
  EXPECT_FALSE(choose({}, 100, 16));
}

TEST(RouteChoiceTest, CostsWithinTheMarginAreATieAndBeyondItAreNot) {
  const CostFigures f = costs();
  CostFigures slower = f;
  for (auto& [rows, us] : slower.prefill) us *= 1.2;  // start-up noise
  // The slower-measured daemon has the higher score: within the margin, it wins.
  std::vector<Candidate> c = {{PrefixMatch{}, 0, &f, 1}, {PrefixMatch{}, 0, &slower, 2}};
  EXPECT_EQ(choose(c, 256, 16)->index, 1);
  for (auto& [rows, us] : slower.prefill) us *= 2;  // really slower (2.4x)
  EXPECT_EQ(choose(c, 256, 16)->index, 0);
}

TEST(RouteChoiceTest, AmongEqualsTheOneHoldingNotablyMoreInL1Wins) {
  CostFigures f = costs();
  f.per_block_us[Tier::kL2] = 1;  // 15 blocks from L2: 15 us, within the margin of L1's 0
  // 15 blocks in L1 against 15 in L2: equal costs, but the L1 holder is
  // chosen over a higher rendezvous score (loading its copy again
  // elsewhere would hold the prompt twice in the fleet's L1).
  std::vector<Candidate> c = {{held(Tier::kL2, 15), 0, &f, 9}, {held(Tier::kL1, 15), 0, &f, 1}};
  EXPECT_EQ(choose(c, 256, 16)->index, 1);
  // One block more in L1 (of 16: a shared system prompt's) is not notably
  // more: the rendezvous score decides, so new prompts still spread.
  c = {{held(Tier::kL1, 1), 0, &f, 1}, {PrefixMatch{}, 0, &f, 9}};
  EXPECT_EQ(choose(c, 256, 16)->index, 1);
  // More than a quarter of the prompt's 16 are: 5 in L1 against 5 in L2.
  c = {{held(Tier::kL1, 5), 0, &f, 1}, {held(Tier::kL2, 5), 0, &f, 9}};
  EXPECT_EQ(choose(c, 256, 16)->index, 0);
  c[0].match = held(Tier::kL1, 4);
  c[1].match = held(Tier::kL2, 4);
  EXPECT_EQ(choose(c, 256, 16)->index, 1);
}

}  // namespace
}  // namespace kvtier::router

// The shared generator (util/random.h): pinned to the words it gave before it
// moved out of engine/model/sampler.cpp and engine/model/model_weights.cpp, so that a
// seed keeps naming the same tokens and the same random weights.
#include "util/random.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvtier::util {
namespace {

TEST(RandomTest, Splitmix64GivesThePublishedStream) {
  std::uint64_t state = 1234567;
  EXPECT_EQ(splitmix64(state), 6457827717110365317ULL);
  EXPECT_EQ(splitmix64(state), 3203168211198807973ULL);
  EXPECT_EQ(splitmix64(state), 9817491932198370423ULL);
  EXPECT_EQ(splitmix64(state), 4593380528125082431ULL);
  EXPECT_EQ(splitmix64(state), 16408922859458223821ULL);
  EXPECT_EQ(state, 1234567 + 5 * 0x9e3779b97f4a7c15ULL);  // the state advances by the step
}

TEST(RandomTest, Xoshiro256StarStarKeepsItsStreamForASeed) {
  Xoshiro256StarStar zero(0);
  EXPECT_EQ(zero.next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(zero.next(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(zero.next(), 0x1a5f849d4933e6e0ULL);
  Xoshiro256StarStar other(1234567);
  EXPECT_EQ(other.next(), 0x30a3a1c363600467ULL);
  EXPECT_EQ(other.next(), 0x19405f0f579929caULL);
  EXPECT_EQ(other.next(), 0x115beaac046ddbd9ULL);
}

}  // namespace
}  // namespace kvtier::util

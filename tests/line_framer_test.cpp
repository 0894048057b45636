#include "wire/line_framer.h"

#include <gtest/gtest.h>

namespace kvtier::wire {
namespace {

TEST(LineFramerTest, SplitsLinesAcrossFeedsAndStripsCarriageReturns) {
  LineFramer f(100);
  EXPECT_TRUE(f.feed("{\"a\"").empty());
  auto items = f.feed(":1}\r\n\n{}\n{");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].line, "{\"a\":1}");
  EXPECT_EQ(items[1].line, "{}");
  EXPECT_EQ(f.buffered(), 1u);
}

TEST(LineFramerTest, OverlongLineIsReportedOnceAndSkippedToItsEnd) {
  LineFramer f(8);
  auto items = f.feed("0123456789");
  ASSERT_EQ(items.size(), 1u);
  EXPECT_TRUE(items[0].too_long);
  EXPECT_TRUE(f.feed(std::string(1000, 'x')).empty());  // still the same line
  EXPECT_EQ(f.buffered(), 0u);
  items = f.feed("yy\nok\n");
  ASSERT_EQ(items.size(), 1u);
  EXPECT_FALSE(items[0].too_long);
  EXPECT_EQ(items[0].line, "ok");
}

TEST(LineFramerTest, LineOfExactlyTheLimitIsAccepted) {
  LineFramer f(4);
  auto items = f.feed("abcd\n");
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].line, "abcd");
}

}  // namespace
}  // namespace kvtier::wire

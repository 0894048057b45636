#include "daemon/log.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier::daemon {
namespace {

// Numbers in the log as people write them: "10 s", not "10.000000 s".
TEST(LogTest, NumbersReadAsPeopleWriteThem) {
  EXPECT_EQ(log_number(10), "10");
  EXPECT_EQ(log_number(0), "0");
  EXPECT_EQ(log_number(-0.0), "0");
  EXPECT_EQ(log_number(2.5), "2.5");
  EXPECT_EQ(log_number(0.25), "0.25");
  EXPECT_EQ(log_number(0.001), "0.001");
  EXPECT_EQ(log_number(3.14159), "3.14");
  EXPECT_EQ(log_number(33.14159), "33.1");
  EXPECT_EQ(log_number(1234.5678), "1235");
  EXPECT_EQ(log_number(1e12), "1000000000000");
  EXPECT_EQ(log_number(-4.5), "-4.5");
  EXPECT_EQ(log_number(std::numeric_limits<double>::infinity()), "inf");
}

}  // namespace
}  // namespace kvtier::daemon

// Credentials read from files: the contents without the editor's trailing
// newline, and a clear refusal naming the setting and the path for a file
// everyone may read, a missing one, a directory, or one too long.
#include "util/private_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "test_util.h"

namespace kvtier::util {
namespace {

using test_util::contains;

TEST(PrivateFileTest, ReadsTheContentsWithoutTheTrailingNewline) {
  test_util::TempDir dir;
  const std::string path = dir.write("password", "s3cret\n").string();
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(read_private_file("remote_password_file", path, 64).value(), "s3cret");
  const std::string two = dir.write("two", "a\n\n").string();
  ::chmod(two.c_str(), 0640);
  EXPECT_EQ(read_private_file("x", two, 64).value(), "a\n");
}

TEST(PrivateFileTest, RefusesWhatIsNotPrivateOrNotThere) {
  test_util::TempDir dir;
  const std::string open_to_all = dir.write("password", "s3cret").string();
  ::chmod(open_to_all.c_str(), 0644);
  auto refused = read_private_file("remote_password_file", open_to_all, 64);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(contains(refused.error(), "remote_password_file " + open_to_all + ": "));
  EXPECT_TRUE(contains(refused.error(), "chmod o-r")) << refused.error();

  const std::string missing = (dir.path() / "missing").string();
  EXPECT_TRUE(contains(read_private_file("s", missing, 64).error(), "No such file"));
  EXPECT_TRUE(contains(read_private_file("s", dir.path().string(), 64).error(), "not a file"));
  const std::string longer = dir.write("long", std::string(65, 'x')).string();
  ::chmod(longer.c_str(), 0600);
  EXPECT_TRUE(contains(read_private_file("s", longer, 64).error(), "more than 64 bytes"));
}

}  // namespace
}  // namespace kvtier::util

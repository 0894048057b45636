// The fleet's secret: read from a file with the checks a key file gets, and
// HMAC-SHA256 as RFC 4231 computes it.
#include "tiers/remote_secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvtier::tiers {
namespace {

namespace fs = std::filesystem;

std::string hex(std::span<const std::byte> b) {
  std::string out;
  char buf[3];
  for (std::byte x : b) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(x));
    out += buf;
  }
  return out;
}

std::span<const std::byte> text(std::string_view s) { return std::as_bytes(std::span(s)); }

class RemoteSecretFileTest : public ::testing::Test {
 protected:
  RemoteSecretFileTest()
      : dir_(fs::temp_directory_path() / ("kvtier-secret-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~RemoteSecretFileTest() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& contents, mode_t mode) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << contents;
    ::chmod(p.c_str(), mode);
    return p.string();
  }
  fs::path dir_;
};

// RFC 4231, test case 1 (a 20-byte key of 0x0b, "Hi There") and the same
// message in two parts.
TEST(RemoteSecretTest, MacIsHmacSha256) {
  const std::vector<std::byte> key(20, std::byte{0x0b});
  const RemoteSecret secret = RemoteSecret::from_bytes(key).value();
  const auto whole = secret.mac({text("Hi There")});
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(hex(*whole), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(secret.mac({text("Hi "), text("There")}), whole);
  EXPECT_TRUE(secret.verify(*whole, {text("Hi There")}));
  EXPECT_FALSE(secret.verify(*whole, {text("Hi there")}));
  EXPECT_FALSE(secret.verify(std::span(*whole).first(31), {text("Hi There")}));
}

TEST(RemoteSecretTest, ASecretTooShortOrTooLongIsRefused) {
  EXPECT_FALSE(RemoteSecret::from_bytes(text("fifteen bytes!!")).has_value());
  EXPECT_TRUE(RemoteSecret::from_bytes(text("sixteen bytes!!!")).has_value());
  const std::vector<std::byte> huge(RemoteSecret::kMaxBytes + 1, std::byte{1});
  EXPECT_FALSE(RemoteSecret::from_bytes(huge).has_value());
}

TEST_F(RemoteSecretFileTest, AFileGivesItsBytesWithoutTheTrailingNewline) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  const auto from_file = RemoteSecret::from_file(write("key", key + "\n", 0600));
  ASSERT_TRUE(from_file.has_value()) << from_file.error();
  const auto from_bytes = RemoteSecret::from_bytes(text(key)).value();
  EXPECT_EQ(from_file->mac({text("x")}), from_bytes.mac({text("x")}));
}

TEST_F(RemoteSecretFileTest, BadFilesAreRefusedWithTheReason) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  const auto error = [](const std::expected<RemoteSecret, std::string>& s) {
    return s ? std::string("accepted") : s.error();
  };
  EXPECT_NE(error(RemoteSecret::from_file((dir_ / "missing").string())).find("No such file"),
            std::string::npos);
  EXPECT_NE(error(RemoteSecret::from_file(write("open", key, 0644))).find("chmod o-r"),
            std::string::npos);
  EXPECT_NE(error(RemoteSecret::from_file(write("short", "abc\n", 0600))).find("this one 3"),
            std::string::npos);
  EXPECT_NE(error(RemoteSecret::from_file(dir_.string())).find("not a file"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::tiers

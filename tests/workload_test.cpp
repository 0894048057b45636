// The load generator's workloads (bench/workload.cpp): workload f's long
// documents must fit the model's context, as GPT-2's BPE reads them and as a
// character model reads them, share their preamble, and come back the same
// when a document is revisited.
#include "bench/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "engine/model/bpe_tokenizer.h"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;

// The prompt without its question (after the last newline but one).
std::string without_question(const std::string& prompt) {
  const std::size_t q = prompt.rfind("\nQ: ");
  return q == std::string::npos ? prompt : prompt.substr(0, q);
}

TEST(WorkloadTest, ParsesLettersAToF) {
  EXPECT_EQ(parse_kinds("a,f"), "af");
  EXPECT_EQ(parse_kinds("f"), "f");
  EXPECT_FALSE(parse_kinds("g").has_value());
}

TEST(WorkloadTest, LongDocumentsFitGpt2sContextInBpeTokens) {
  const fs::path dir = fs::path(KVTIER_SOURCE_DIR) / "models" / "gpt2-bpe";
  auto tok = BpeTokenizer::load(dir / "encoder.json", dir / "vocab.bpe");
  ASSERT_TRUE(tok.has_value()) << tok.error();
  ASSERT_TRUE(gpt2_bpe_vocab((*tok)->vocab_size()));
  constexpr int kContext = 1024;
  Workload w("f", 7, kContext, /*word_tokens=*/true);
  std::vector<int> first;
  int shortest = kContext, longest = 0;
  for (int i = 0; i < 60; ++i) {
    const WorkItem item = w.next();
    ASSERT_EQ(item.kind, 'f');
    auto ids = (*tok)->encode(item.prompt);
    ASSERT_TRUE(ids.has_value()) << ids.error();
    const int n = static_cast<int>(ids->size());
    EXPECT_LE(n + item.max_tokens, kContext) << item.prompt;
    shortest = std::min(shortest, n);
    longest = std::max(longest, n);
    // One token per word, full stop and newline before the question: the
    // vocabulary is what the sizing assumes.
    const std::string text = without_question(item.prompt);
    auto text_ids = (*tok)->encode(text);
    ASSERT_TRUE(text_ids.has_value());
    const auto pieces = std::count(text.begin(), text.end(), ' ') +
                        std::count(text.begin(), text.end(), '.') +
                        std::count(text.begin(), text.end(), '\n');
    EXPECT_EQ(static_cast<long>(text_ids->size()), pieces) << text;
    if (first.empty()) {
      first = *ids;
      continue;
    }
    // The preamble: at least 7 full 16-token blocks every prompt shares.
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 7 * 16, ids->begin())) << i;
  }
  // Long: most of the context.
  std::printf("workload f on GPT-2's BPE: prompts of %d to %d tokens\n", shortest, longest);
  EXPECT_GE(shortest, kContext * 3 / 4);
  EXPECT_GE(longest, kContext * 9 / 10);
}

TEST(WorkloadTest, LongDocumentsFitACharacterModelsContext) {
  Workload w("f", 3, 256);
  for (int i = 0; i < 200; ++i) {
    const WorkItem item = w.next();
    EXPECT_LE(static_cast<int>(item.prompt.size()) + item.max_tokens, 256) << item.prompt;
    EXPECT_GE(item.prompt.size(), 150u) << item.prompt;
  }
}

TEST(WorkloadTest, LongDocumentsAreNewOrRevisitedWithTheSameText) {
  Workload w("f", 11, 1024, true);
  std::map<long, std::string> seen;
  long next = 0, fresh = 0, recent = 0, revisits = 0;
  for (int i = 0; i < 400; ++i) {
    const WorkItem item = w.next();
    ASSERT_GE(item.document, 0);
    ASSERT_LE(item.document, next);
    const std::string text = without_question(item.prompt);
    if (item.document == next) {
      ++next, ++fresh;
      EXPECT_TRUE(seen.emplace(item.document, text).second);
      continue;
    }
    ++revisits;
    if (item.document >= next - 8) ++recent;
    EXPECT_EQ(seen.at(item.document), text) << item.document;
  }
  // Half new, half back; half of those to one of the 8 latest (plus old
  // ones that happen to be among them).
  EXPECT_NEAR(fresh, 200, 40);
  EXPECT_NEAR(revisits, 200, 40);
  EXPECT_GE(recent, revisits / 3);
  EXPECT_LT(recent, revisits);
}

}  // namespace
}  // namespace kvtier::bench

// Tests for engine/model/sampler.cpp: SamplingParams::validate, Sampler,
// validate_stop_strings and StopMatcher.
#include "engine/model/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvtier {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplingParams params_with(float temperature, int top_k, float top_p, std::uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

std::vector<int> sample_n(const SamplingParams& params, const std::vector<float>& logits, int n) {
  Sampler sampler(params);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.sample(logits));
  return out;
}

std::vector<int> counts_of(const std::vector<int>& tokens, int vocab) {
  std::vector<int> counts(vocab, 0);
  for (int t : tokens) counts.at(t)++;
  return counts;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p;
  double total = 0.0;
  for (float l : logits) total += p.emplace_back(std::exp((l - max) / temperature));
  for (double& x : p) x /= total;
  return p;
}

// Each count must lie within 5 binomial standard deviations of n * p. The
// samplers are seeded, so this is deterministic; 5 sigma keeps it from being
// tuned to one seed while still catching a wrong distribution.
void expect_matches_distribution(const std::vector<int>& counts, const std::vector<double>& p,
                                 int n) {
  ASSERT_EQ(counts.size(), p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double mean = n * p[i];
    const double sigma = std::sqrt(n * p[i] * (1.0 - p[i]));
    EXPECT_NEAR(counts[i], mean, 5.0 * sigma) << "token " << i << " (p = " << p[i] << ")";
  }
}

// Logits for a GPT-2 sized vocabulary, deterministic and without a <random> engine.
std::vector<float> pseudo_random_logits(int v, std::uint64_t seed) {
  std::vector<float> logits(v);
  std::uint64_t x = seed;
  for (float& l : logits) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    l = static_cast<float>((x >> 40) % 2000) / 100.0f - 10.0f;  // [-10, 10), many ties
  }
  return logits;
}

// --- SamplingParams::validate ---

TEST(SamplingParamsTest, DefaultsAndGreedyAreValid) {
  EXPECT_TRUE(SamplingParams{}.validate().has_value());
  EXPECT_TRUE(params_with(0.0f, 0, 1.0f, 0).validate().has_value());
  EXPECT_TRUE(params_with(0.7f, 40, 0.9f, 7).validate().has_value());
}

TEST(SamplingParamsTest, RejectsBadTemperature) {
  for (float t : {-0.5f, kInf, kNaN}) {
    const auto r = params_with(t, 0, 1.0f, 0).validate();
    ASSERT_FALSE(r.has_value()) << t;
    EXPECT_NE(r.error().find("temperature"), std::string::npos) << r.error();
  }
}

TEST(SamplingParamsTest, RejectsNegativeTopK) {
  const auto r = params_with(1.0f, -1, 1.0f, 0).validate();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("top_k"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("-1"), std::string::npos) << r.error();
}

TEST(SamplingParamsTest, RejectsTopPOutsideUnitInterval) {
  for (float p : {0.0f, -0.1f, 1.5f, kNaN}) {
    const auto r = params_with(1.0f, 0, p, 0).validate();
    ASSERT_FALSE(r.has_value()) << p;
    EXPECT_NE(r.error().find("top_p"), std::string::npos) << r.error();
  }
}

// --- Sampler ---

TEST(SamplerTest, GreedyPicksArgmax) {
  Sampler s(params_with(0.0f, 0, 1.0f, 0));
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 2.9f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-5.0f, -4.0f, -3.0f}), 2);
  EXPECT_EQ(s.sample(std::vector<float>{7.0f}), 0);
}

TEST(SamplerTest, GreedyBreaksTiesTowardLowestId) {
  Sampler s(params_with(0.0f, 0, 1.0f, 0));
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 5.0f, 2.0f, 5.0f, 5.0f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{4.0f, 4.0f}), 0);
}

TEST(SamplerTest, SameSeedSameSequence) {
  const std::vector<float> logits(1000, 0.0f);
  for (const SamplingParams& p :
       {params_with(1.0f, 0, 1.0f, 42), params_with(0.8f, 50, 1.0f, 42),
        params_with(1.0f, 0, 0.9f, 42), params_with(1.3f, 100, 0.5f, 42)}) {
    EXPECT_EQ(sample_n(p, logits, 100), sample_n(p, logits, 100));
  }
}

TEST(SamplerTest, DifferentSeedDifferentSequence) {
  const std::vector<float> logits(1000, 0.0f);
  const auto a = sample_n(params_with(1.0f, 0, 1.0f, 1), logits, 50);
  const auto b = sample_n(params_with(1.0f, 0, 1.0f, 2), logits, 50);
  const auto zero = sample_n(params_with(1.0f, 0, 1.0f, 0), logits, 50);
  EXPECT_NE(a, b);
  EXPECT_NE(a, zero);
  // Seed 0 must still give a working stream, not a constant one.
  EXPECT_GT(std::set<int>(zero.begin(), zero.end()).size(), 10u);
}

// Two requests batched together must each see the tokens they would get alone.
TEST(SamplerTest, InterleavedSamplersMatchRunningAlone) {
  const std::vector<float> logits_a = {0.5f, 1.0f, 0.0f, 2.0f, -1.0f};
  const std::vector<float> logits_b = pseudo_random_logits(300, 9);
  const SamplingParams pa = params_with(1.0f, 0, 1.0f, 11);
  const SamplingParams pb = params_with(0.9f, 20, 0.95f, 11);  // same seed on purpose
  const auto alone_a = sample_n(pa, logits_a, 200);
  const auto alone_b = sample_n(pb, logits_b, 200);

  Sampler a(pa), b(pb);
  std::vector<int> mixed_a, mixed_b;
  // An irregular interleaving: every third round b runs without a.
  for (int i = 0; mixed_a.size() < 200 || mixed_b.size() < 200; ++i) {
    if (i % 3 != 2 && mixed_a.size() < 200) mixed_a.push_back(a.sample(logits_a));
    if (mixed_b.size() < 200) mixed_b.push_back(b.sample(logits_b));
  }
  EXPECT_EQ(mixed_a, alone_a);
  EXPECT_EQ(mixed_b, alone_b);
}

// Each sampled token uses exactly one draw, however its logits look (peaked,
// one finite entry, all -inf, NaN): after any n tokens the next token from a
// flat distribution must be the same as after n flat tokens.
TEST(SamplerTest, EachTokenConsumesExactlyOneDraw) {
  const std::vector<float> flat(64, 0.0f);
  std::vector<float> one_finite(64, -kInf);
  one_finite[5] = 1.0f;
  const std::vector<float> all_neg_inf(64, -kInf);
  std::vector<float> peaked(64, -30.0f);
  peaked[0] = 30.0f;
  std::vector<float> with_nan = flat;
  with_nan[3] = kNaN;
  const std::vector<std::vector<float>> odd = {one_finite, all_neg_inf, peaked, with_nan, flat};

  for (const SamplingParams& p : {params_with(1.0f, 0, 1.0f, 5), params_with(1.0f, 8, 1.0f, 5),
                                  params_with(1.0f, 0, 0.5f, 5), params_with(0.7f, 8, 0.9f, 5)}) {
    Sampler reference(p), tested(p);
    for (int i = 0; i < 50; ++i) {
      reference.sample(flat);
      tested.sample(odd[i % odd.size()]);
      EXPECT_EQ(tested.sample(flat), reference.sample(flat)) << "step " << i;
    }
  }
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  const std::vector<float> logits = pseudo_random_logits(50257, 3);
  Sampler greedy(params_with(0.0f, 0, 1.0f, 0));
  const int argmax = greedy.sample(logits);
  for (int t : sample_n(params_with(1.5f, 1, 1.0f, 8), logits, 20)) EXPECT_EQ(t, argmax);
}

TEST(SamplerTest, TopKRestrictsSupportToTheKLargest) {
  const int k = 40;
  const std::vector<float> logits = pseudo_random_logits(50257, 4);
  // The allowed set by a full sort on (logit desc, id asc): the reference for the selection.
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  const std::set<int> allowed(order.begin(), order.begin() + k);

  // A high temperature flattens the distribution so that every kept token shows up.
  const auto tokens = sample_n(params_with(100.0f, k, 1.0f, 12), logits, 1000);
  std::set<int> seen;
  for (int t : tokens) {
    EXPECT_TRUE(allowed.count(t)) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen, allowed);
}

TEST(SamplerTest, TopKTiesGoToLowerIds) {
  const std::vector<float> logits(10, 1.0f);
  const auto counts = counts_of(sample_n(params_with(1.0f, 3, 1.0f, 13), logits, 3000), 10);
  for (int i = 0; i < 3; ++i) EXPECT_GT(counts[i], 0) << i;
  for (int i = 3; i < 10; ++i) EXPECT_EQ(counts[i], 0) << i;
}

TEST(SamplerTest, TinyTopPKeepsOnlyTheArgmax) {
  const std::vector<float> logits = pseudo_random_logits(50257, 5);
  Sampler greedy(params_with(0.0f, 0, 1.0f, 0));
  const int argmax = greedy.sample(logits);
  for (int t : sample_n(params_with(2.0f, 0, 1e-6f, 14), logits, 50)) EXPECT_EQ(t, argmax);
  for (int t : sample_n(params_with(2.0f, 100, 1e-6f, 14), logits, 50)) EXPECT_EQ(t, argmax);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingTheMass) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (in shuffled id order): 0.5 < 0.75 <= 0.8,
  // so the nucleus is the two most likely tokens, renormalised to 5/8 and 3/8.
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f),
                                     std::log(0.3f)};
  const int n = 20000;
  for (int top_k : {0, 3}) {
    const auto counts = counts_of(sample_n(params_with(1.0f, top_k, 0.75f, 15), logits, n), 4);
    EXPECT_EQ(counts[0], 0);
    EXPECT_EQ(counts[2], 0);
    expect_matches_distribution(counts, {0.0, 0.625, 0.0, 0.375}, n);
  }
}

TEST(SamplerTest, TopPWithTiesKeepsLowerIds) {
  // Four equal tokens: mass 0.5 is reached by exactly two, and they must be ids 0 and 1.
  const std::vector<float> logits(4, 2.0f);
  const auto counts = counts_of(sample_n(params_with(1.0f, 0, 0.5f, 16), logits, 2000), 4);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
}

// The top_p-only path sorts a growing prefix; with a flat-ish distribution the
// nucleus spans several chunks and must still match a full-sort reference.
TEST(SamplerTest, TopPLargeNucleusMatchesFullSortReference) {
  const std::vector<float> logits = pseudo_random_logits(5000, 6);
  const float top_p = 0.6f;
  const float temperature = 4.0f;
  const std::vector<double> p = softmax(logits, temperature);
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  std::set<int> nucleus;
  double cum = 0.0;
  for (int id : order) {
    nucleus.insert(id);
    cum += p[id];
    if (cum >= top_p) break;
  }
  ASSERT_GT(nucleus.size(), 400u);  // more than one of the sampler's chunks (64, then 512)

  std::set<int> seen;
  for (int t : sample_n(params_with(temperature, 0, top_p, 17), logits, 2000)) {
    EXPECT_TRUE(nucleus.count(t)) << t;
    seen.insert(t);
  }
  // Cheap check that the cut is not far too early: most of the nucleus shows up.
  EXPECT_GT(seen.size(), nucleus.size() / 4);
}

TEST(SamplerTest, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  const int n = 20000;
  // Both walks: id order (no truncation) and sorted order (top_k = V - 1 keeps
  // all but the least likely, so check the rest against the renormalised softmax).
  const auto counts = counts_of(sample_n(params_with(1.0f, 0, 1.0f, 21), logits, n), 4);
  expect_matches_distribution(counts, softmax(logits, 1.0), n);

  const auto truncated = counts_of(sample_n(params_with(1.0f, 3, 1.0f, 22), logits, n), 4);
  EXPECT_EQ(truncated[3], 0);
  expect_matches_distribution(truncated, softmax({1.0f, 2.0f, 0.5f, -kInf}, 1.0), n);
}

TEST(SamplerTest, TemperatureScalesTheDistribution) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  const int n = 20000;
  std::vector<int> argmax_count;
  for (float t : {0.5f, 1.0f, 2.0f}) {
    const auto counts = counts_of(sample_n(params_with(t, 0, 1.0f, 23), logits, n), 4);
    expect_matches_distribution(counts, softmax(logits, t), n);
    argmax_count.push_back(counts[1]);
  }
  // Lower temperature sharpens toward the argmax.
  EXPECT_GT(argmax_count[0], argmax_count[1]);
  EXPECT_GT(argmax_count[1], argmax_count[2]);
}

TEST(SamplerTest, NegativeInfinityIsNeverChosen) {
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.0f, -kInf};
  for (const SamplingParams& p :
       {params_with(1.0f, 0, 1.0f, 31), params_with(5.0f, 4, 1.0f, 31),
        params_with(1.0f, 0, 0.99f, 31), params_with(1.0f, 5, 0.99f, 31)}) {
    const auto counts = counts_of(sample_n(p, logits, 2000), 5);
    EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
    EXPECT_GT(counts[1], 0);
    EXPECT_GT(counts[3], 0);
  }
  std::vector<float> one_finite(50257, -kInf);
  one_finite[777] = -3.0f;
  for (int t : sample_n(params_with(1.0f, 0, 1.0f, 32), one_finite, 20)) EXPECT_EQ(t, 777);
  for (int t : sample_n(params_with(1.0f, 10, 0.9f, 32), one_finite, 20)) EXPECT_EQ(t, 777);
}

TEST(SamplerTest, NaNLogitsCountAsNegativeInfinity) {
  const std::vector<float> logits = {kNaN, 1.0f, kNaN, 0.0f};
  Sampler greedy(params_with(0.0f, 0, 1.0f, 0));
  EXPECT_EQ(greedy.sample(logits), 1);
  for (const SamplingParams& p : {params_with(1.0f, 0, 1.0f, 33), params_with(1.0f, 3, 0.9f, 33),
                                  params_with(1.0f, 0, 0.99f, 33)}) {
    const auto counts = counts_of(sample_n(p, logits, 500), 4);
    EXPECT_EQ(counts[0] + counts[2], 0);
  }
  // All NaN or all -inf: no crash, and an id in range.
  for (const std::vector<float>& degenerate :
       {std::vector<float>(7, kNaN), std::vector<float>(7, -kInf)}) {
    for (const SamplingParams& p : {params_with(0.0f, 0, 1.0f, 34), params_with(1.0f, 0, 1.0f, 34),
                                    params_with(1.0f, 3, 0.5f, 34)}) {
      for (int t : sample_n(p, degenerate, 20)) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, 7);
      }
    }
  }
}

TEST(SamplerTest, PositiveInfinityTakesAllTheMass) {
  const std::vector<float> logits = {3.0f, kInf, 100.0f, kInf};
  const auto counts = counts_of(sample_n(params_with(1.0f, 0, 1.0f, 35), logits, 1000), 4);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
}

// --- validate_stop_strings ---

TEST(TokenLogprobsTest, LogSoftmaxOfTheChosenAndTheTopInOrder) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  const LogprobsEntry e = token_logprobs(logits, 2, 3);
  EXPECT_EQ(e.chosen.token, 2);
  EXPECT_NEAR(e.chosen.logprob, 2.0 - std::log(sum), 1e-6);
  ASSERT_EQ(e.top.size(), 3u);
  EXPECT_EQ(e.top[0].token, 1);  // the tie at 3.0 goes to the lower id
  EXPECT_EQ(e.top[1].token, 3);
  EXPECT_EQ(e.top[2].token, 2);
  EXPECT_FLOAT_EQ(e.top[0].logprob, e.top[1].logprob);
  EXPECT_FLOAT_EQ(e.top[2].logprob, e.chosen.logprob);
  double mass = 0;
  for (int t = 0; t < 5; ++t) mass += std::exp(token_logprobs(logits, t, 0).chosen.logprob);
  EXPECT_NEAR(mass, 1.0, 1e-6);
  EXPECT_TRUE(token_logprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits, 0, 20).top.size(), 5u);  // no more than the vocabulary
}

TEST(TokenLogprobsTest, NanIsNegativeInfinityAndInfinitiesShareTheMass) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> nan = {std::nanf(""), 0.0f};
  EXPECT_EQ(token_logprobs(nan, 0, 0).chosen.logprob, -inf);
  EXPECT_FLOAT_EQ(token_logprobs(nan, 1, 0).chosen.logprob, 0.0f);
  const std::vector<float> two_inf = {inf, 5.0f, inf};
  EXPECT_NEAR(token_logprobs(two_inf, 0, 0).chosen.logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(token_logprobs(two_inf, 1, 0).chosen.logprob, -inf);
}

TEST(TokenLogprobsTest, ReportingThemChangesNothingDrawn) {
  std::vector<float> logits(50, 0.0f);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  Sampler plain({0.8f, 0, 1.0f, 9}), reporting({0.8f, 0, 1.0f, 9});
  for (int i = 0; i < 100; ++i) {
    const int token = reporting.sample(logits);
    (void)token_logprobs(logits, token, 5);
    EXPECT_EQ(plain.sample(logits), token);
  }
}

TEST(ValidateStopStringsTest, AcceptsLimits) {
  EXPECT_TRUE(validate_stop_strings({}).has_value());
  EXPECT_TRUE(validate_stop_strings({"\n", "User:"}).has_value());
  EXPECT_TRUE(validate_stop_strings(std::vector<std::string>(kMaxStopStrings, "x")).has_value());
  EXPECT_TRUE(validate_stop_strings({std::string(kMaxStopStringBytes, 'a')}).has_value());
}

TEST(ValidateStopStringsTest, RejectsEmptyTooManyAndTooLong) {
  const auto empty = validate_stop_strings({"ok", ""});
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().find("stop string 1 is empty"), std::string::npos) << empty.error();

  const auto many = validate_stop_strings(std::vector<std::string>(kMaxStopStrings + 1, "x"));
  ASSERT_FALSE(many.has_value());
  EXPECT_NE(many.error().find("17"), std::string::npos) << many.error();

  const auto long_stop = validate_stop_strings({std::string(kMaxStopStringBytes + 1, 'a')});
  ASSERT_FALSE(long_stop.has_value());
  EXPECT_NE(long_stop.error().find("257"), std::string::npos) << long_stop.error();
}

// --- StopMatcher ---

TEST(StopMatcherTest, FindsStopStraddlingPieces) {
  StopMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.feed("Hello\n"), std::nullopt);
  EXPECT_EQ(m.feed("\nUs"), std::nullopt);
  EXPECT_EQ(m.feed("er: hi"), std::optional<std::size_t>(5));
}

TEST(StopMatcherTest, FindsStopSplitOneByteAtATime) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.feed("xa"), std::nullopt);
  EXPECT_EQ(m.feed("b"), std::nullopt);
  EXPECT_EQ(m.feed(""), std::nullopt);
  EXPECT_EQ(m.feed("c"), std::optional<std::size_t>(1));
}

TEST(StopMatcherTest, ReturnsEarliestOfSeveralStops) {
  StopMatcher m({"world", "lo w", "o"});
  EXPECT_EQ(m.feed("hell"), std::nullopt);
  EXPECT_EQ(m.feed("o world"), std::optional<std::size_t>(3));
}

// "bc" ends first, but "abcd" starts earlier in the same piece.
TEST(StopMatcherTest, EarliestStartWinsOverEarliestEnd) {
  StopMatcher m({"bc", "abcd"});
  EXPECT_EQ(m.feed("xabcd"), std::optional<std::size_t>(1));
}

TEST(StopMatcherTest, ResultIsFixedOnceFound) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.feed("aEND"), std::optional<std::size_t>(1));
  EXPECT_EQ(m.feed("END END"), std::optional<std::size_t>(1));
  EXPECT_EQ(m.pending_bytes(), 0u);
}

TEST(StopMatcherTest, PendingBytesHoldsBackPossibleStopPrefix) {
  StopMatcher m({"</s>", "\n\n"});
  m.feed("abc<");
  EXPECT_EQ(m.pending_bytes(), 1u);
  m.feed("/");
  EXPECT_EQ(m.pending_bytes(), 2u);
  m.feed("x\n");
  EXPECT_EQ(m.pending_bytes(), 1u);
  m.feed("y");
  EXPECT_EQ(m.pending_bytes(), 0u);
}

// After "aaa", the stop "aab" could still complete from the last two bytes:
// the matcher must fall back to a shorter prefix, not forget the partial match.
TEST(StopMatcherTest, PendingBytesFallsBackOnSelfOverlappingStop) {
  StopMatcher m({"aab"});
  EXPECT_EQ(m.feed("aaa"), std::nullopt);
  EXPECT_EQ(m.pending_bytes(), 2u);
  EXPECT_EQ(m.feed("b"), std::optional<std::size_t>(1));
}

TEST(StopMatcherTest, NoStopsOrOnlyEmptyStopsNeverMatch) {
  StopMatcher none({});
  StopMatcher empty({""});
  EXPECT_EQ(none.feed("anything"), std::nullopt);
  EXPECT_EQ(empty.feed("anything"), std::nullopt);
  EXPECT_EQ(none.pending_bytes(), 0u);
  EXPECT_EQ(empty.pending_bytes(), 0u);
}

// The reference: search the whole text with std::string::find after every
// piece, and compute pending bytes by trying every suffix.
TEST(StopMatcherTest, MatchesNaiveReferenceOnRandomInput) {
  std::uint64_t x = 12345;
  auto next = [&x](std::uint64_t bound) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::size_t>((x >> 33) % bound);
  };
  auto random_string = [&](std::size_t max_len) {
    std::string s(1 + next(max_len), ' ');
    for (char& c : s) c = "ab"[next(2)];
    return s;
  };
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<std::string> stops;
    for (std::size_t i = 0, n = 1 + next(3); i < n; ++i) stops.push_back(random_string(6));
    StopMatcher m(stops);
    std::string text;
    for (int piece_index = 0; piece_index < 8; ++piece_index) {
      const std::string piece = next(4) == 0 ? "" : random_string(5);
      text += piece;
      std::optional<std::size_t> expected;
      for (const std::string& s : stops) {
        const std::size_t at = text.find(s);
        if (at != std::string::npos && (!expected || at < *expected)) expected = at;
      }
      ASSERT_EQ(m.feed(piece), expected) << "trial " << trial << " text " << text;
      if (expected) break;
      std::size_t pending = 0;
      for (const std::string& s : stops) {
        for (std::size_t len = 1; len < s.size() && len <= text.size(); ++len) {
          if (text.compare(text.size() - len, len, s, 0, len) == 0)
            pending = std::max(pending, len);
        }
      }
      ASSERT_EQ(m.pending_bytes(), pending) << "trial " << trial << " text " << text;
    }
  }
}

}  // namespace
}  // namespace kvtier

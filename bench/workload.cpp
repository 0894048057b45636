#include "bench/workload.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace kvtier::bench {

namespace {

// 7 pages of 16 characters and a bit: long enough that every user of
// workload a shares several full blocks.
constexpr std::string_view kSystemPrompt =
    "You are a helpful assistant who answers in the style of an old fortune "
    "cookie. Keep every answer short, kind and a little strange.\n";

constexpr std::array<std::string_view, 16> kSubjects = {
    "a computer", "the moon", "a cat",   "money",    "love",   "a program",  "the sea", "a lawyer",
    "the rain",   "my boss",  "a dream", "the news", "Monday", "a question", "the law", "a poem"};

constexpr std::array<std::string_view, 8> kAsks = {
    "What is ",  "Why is ",     "Tell me about ",    "Who needs ",
    "Where is ", "How big is ", "When will I meet ", "Can you explain "};

// The batch job of workload c reads one of these long passages.
constexpr std::array<std::string_view, 3> kBatchTexts = {
    "It is a truth universally acknowledged that a program in possession of a "
    "good compiler must be in want of a bug. Summarise the following report: ",
    "The committee met on Tuesday to discuss the budget, the weather, the new "
    "coffee machine and the meaning of life. The minutes read as follows: ",
    "Once upon a time there was a small computer that dreamt of becoming a "
    "large computer. Every night it counted its bytes and wrote this story: "};

// Workload e's applications: each company's assistant in each tone is one
// system prompt (12 x 2), every one 7 to 9 pages of 16 characters.
constexpr std::array<std::string_view, 12> kCompanies = {
    "Acme Rockets",   "Blue Harbor Bank", "Cedar Health",    "Delta Plumbing",
    "Ember Books",    "Fjord Travel",     "Granite Legal",   "Hollow Hill Farm",
    "Iris Opticians", "Juniper Schools",  "Kestrel Airways", "Lantern Energy"};
constexpr std::array<std::string_view, 2> kTones = {
    "Answer in two short sentences, politely, and never promise a refund.\n",
    "Be cheerful and brief; when unsure, tell the user to call the front desk.\n"};
constexpr std::size_t kApplications = kCompanies.size() * kTones.size();

constexpr std::string_view kLetters = "abcdefghijklmnopqrstuvwxyz     ";

// Workload f's vocabulary: common words that GPT-2's BPE reads, each with its
// leading space, as one token (tests/workload_test.cpp checks it).
constexpr std::array<std::string_view, 132> kWords = {
    "the",     "of",     "and",    "to",         "in",       "is",     "was",    "for",    "on",
    "that",    "with",   "as",     "by",         "at",       "from",   "his",    "it",     "an",
    "were",    "are",    "which",  "this",       "be",       "has",    "had",    "not",    "but",
    "its",     "have",   "their",  "one",        "after",    "first",  "new",    "two",    "who",
    "they",    "been",   "more",   "other",      "all",      "time",   "there",  "when",   "into",
    "year",    "most",   "only",   "over",       "city",     "three",  "some",   "about",  "would",
    "may",     "where",  "later",  "during",     "between",  "under",  "world",  "while",  "out",
    "team",    "since",  "well",   "part",       "them",     "both",   "war",    "can",    "many",
    "through", "if",     "such",   "than",       "national", "known",  "what",   "then",   "made",
    "being",   "these",  "back",   "found",      "area",     "river",  "united", "used",   "each",
    "season",  "any",    "before", "government", "line",     "same",   "four",   "long",   "based",
    "people",  "number", "end",    "day",        "called",   "east",   "north",  "west",   "south",
    "old",     "early",  "name",   "against",    "general",  "work",   "life",   "family", "group",
    "school",  "music",  "state",  "country",    "until",    "around", "film",   "house",  "land",
    "water",   "high",   "great",  "place",      "small",    "power"};

// Workload f: room kept after the document for "\n" + the question (at most
// 35 characters, so at most 35 tokens) and the answer.
constexpr int kQuestionReserve = 40;
constexpr int kDocumentAnswer = 8;
// Workload f returns to one of this many most recent documents half the time
// it returns at all.
constexpr long kRecentDocuments = 8;

constexpr int kMaxChats = 16;

}  // namespace

std::optional<std::string> parse_kinds(const std::string& spec) {
  std::string out;
  for (char c : spec) {
    if (c == ',' || c == ' ') continue;
    if (c < 'a' || c > 'f') return std::nullopt;
    if (out.find(c) == std::string::npos) out.push_back(c);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

Workload::Workload(std::string kinds, std::uint64_t seed, int context, bool word_tokens)
    : kinds_(std::move(kinds)),
      rng_(seed),
      context_(context),
      seed_(seed),
      word_tokens_(word_tokens) {
  // The same preamble in every run, whatever the seed.
  std::mt19937_64 preamble_rng(0x6b76746965720001ull);
  preamble_ = words(preamble_rng, context_ / 8 - 1) + "\n";
}

WorkItem Workload::next() {
  const char kind = kinds_[std::uniform_int_distribution<std::size_t>(0, kinds_.size() - 1)(rng_)];
  switch (kind) {
    case 'a':
      return shared_prompt();
    case 'b':
      return chat_turn();
    case 'c':
      return priority_mix();
    case 'e':
      return application_prompt();
    case 'f':
      return document_prompt();
    default:
      return random_prompt();
  }
}

std::string Workload::question() {
  std::uniform_int_distribution<std::size_t> ask(0, kAsks.size() - 1);
  std::uniform_int_distribution<std::size_t> subject(0, kSubjects.size() - 1);
  return "Q: " + std::string(kAsks[ask(rng_)]) + std::string(kSubjects[subject(rng_)]) + "?\nA:";
}

WorkItem Workload::shared_prompt() {
  WorkItem w;
  w.kind = 'a';
  w.prompt = std::string(kSystemPrompt) + question();
  w.max_tokens = 24;
  w.seed = next_seed();
  return w;
}

WorkItem Workload::application_prompt() {
  // Zipf (s = 1) over the applications: weight 1/(rank+1).
  std::array<double, kApplications> weight;
  for (std::size_t i = 0; i < kApplications; ++i) weight[i] = 1.0 / static_cast<double>(i + 1);
  const std::size_t app =
      std::discrete_distribution<std::size_t>(weight.begin(), weight.end())(rng_);
  WorkItem w;
  w.kind = 'e';
  // The company first: applications share no block.
  w.prompt = std::string(kCompanies[app % kCompanies.size()]) +
             " support desk. You are its customer assistant. " +
             std::string(kTones[app / kCompanies.size()]) + question();
  w.max_tokens = 24;
  w.seed = next_seed();
  return w;
}

std::string Workload::words(std::mt19937_64& rng, int budget) const {
  std::uniform_int_distribution<std::size_t> word(0, kWords.size() - 1);
  std::uniform_int_distribution<int> sentence(6, 14);
  std::string out;
  int spent = 0;
  for (;;) {
    const int length = sentence(rng);
    int n = 0;
    for (; n < length; ++n) {
      const std::string_view w = kWords[word(rng)];
      const int cost = word_tokens_ ? 1 : static_cast<int>(w.size()) + 1;
      if (spent + cost + 1 > budget) break;  // + 1: the full stop
      out.push_back(' ');
      out.append(w);
      spent += cost;
    }
    if (n > 0) {
      out.push_back('.');
      ++spent;
    }
    if (n < length) return out;
  }
}

std::string Workload::document(long index) const {
  // Its own stream: the same document whenever it comes back.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index));
  const int budget = context_ - context_ / 8 - kQuestionReserve - kDocumentAnswer;
  const int length = std::uniform_int_distribution<int>(budget * 3 / 4, budget)(rng);
  return words(rng, length);
}

WorkItem Workload::document_prompt() {
  WorkItem w;
  w.kind = 'f';
  w.seed = next_seed();
  w.max_tokens = kDocumentAnswer;
  if (documents_ == 0 || std::bernoulli_distribution(0.5)(rng_)) {
    w.document = documents_++;
  } else if (std::bernoulli_distribution(0.5)(rng_)) {
    const long recent = std::min(documents_, kRecentDocuments);
    w.document = documents_ - 1 - std::uniform_int_distribution<long>(0, recent - 1)(rng_);
  } else {
    w.document = std::uniform_int_distribution<long>(0, documents_ - 1)(rng_);
  }
  w.prompt = preamble_ + document(w.document) + "\n" + question();
  return w;
}

WorkItem Workload::chat_turn() {
  // Continue an idle conversation when there is one (most of the time), so
  // conversations grow; otherwise open a new one, recycling the oldest slot.
  std::vector<int> idle;
  for (int i = 0; i < static_cast<int>(chats_.size()); ++i)
    if (!chats_[i].busy) idle.push_back(i);
  int pick = -1;
  const bool open_new = idle.empty() || std::bernoulli_distribution(0.2)(rng_);
  if (open_new && static_cast<int>(chats_.size()) < kMaxChats) {
    chats_.push_back({});
    pick = static_cast<int>(chats_.size()) - 1;
  } else if (!idle.empty()) {
    pick = idle[std::uniform_int_distribution<std::size_t>(0, idle.size() - 1)(rng_)];
  }
  WorkItem w;
  w.kind = 'b';
  w.max_tokens = 20;
  w.seed = next_seed();
  if (pick < 0) {  // every conversation is waiting: a one-turn chat nobody continues
    w.prompt = question();
    return w;
  }
  Chat& chat = chats_[pick];
  std::string next = chat.text.empty() ? question() : chat.text + "\n" + question();
  // Keep prompt + answer inside the context; a conversation that would not
  // fit starts over (a new user in the same slot).
  if (static_cast<int>(next.size()) + w.max_tokens + 8 > context_) {
    chat = {};
    next = question();
  }
  chat.busy = true;
  w.chat = pick;
  w.turn = chat.turns;
  w.prompt = std::move(next);
  return w;
}

void Workload::answered(const WorkItem& item, const std::string& answer, bool ok) {
  if (item.chat < 0 || item.chat >= static_cast<int>(chats_.size())) return;
  Chat& chat = chats_[item.chat];
  chat.busy = false;
  if (!ok) {
    chat = {};
    return;
  }
  chat.text = item.prompt + answer;
  ++chat.turns;
}

int Workload::busy_chats() const {
  return static_cast<int>(
      std::count_if(chats_.begin(), chats_.end(), [](const Chat& c) { return c.busy; }));
}

WorkItem Workload::priority_mix() {
  WorkItem w;
  w.kind = 'c';
  w.seed = next_seed();
  if (std::bernoulli_distribution(0.25)(rng_)) {
    w.batch = true;
    w.priority = 3;
    w.prompt = std::string(
        kBatchTexts[std::uniform_int_distribution<std::size_t>(0, kBatchTexts.size() - 1)(rng_)]);
    w.max_tokens = std::min(96, context_ - static_cast<int>(w.prompt.size()) - 1);
    w.temperature = 0.8f;
  } else {
    w.priority = 0;
    w.prompt = question();
    w.max_tokens = 16;
  }
  return w;
}

WorkItem Workload::random_prompt() {
  WorkItem w;
  w.kind = 'd';
  w.seed = next_seed();
  const int n = std::uniform_int_distribution<int>(20, 80)(rng_);
  std::uniform_int_distribution<std::size_t> letter(0, kLetters.size() - 1);
  w.prompt.reserve(n);
  for (int i = 0; i < n; ++i) w.prompt.push_back(kLetters[letter(rng_)]);
  w.max_tokens = 16;
  w.temperature = 0.8f;
  return w;
}

}  // namespace kvtier::bench

// Workloads for the load generator and the soak (docs/bench.md): what each
// arriving request asks kvtierd for. Texts are plain ASCII, so they encode
// with the bundled character model, and are sized for its 256-position
// context (prompt + max_tokens stays under `context`).
//
//   a  shared system prompt: one long preamble, a short question after it
//      (prefix reuse across users);
//   b  multi-turn chats: each turn is the previous prompt + its answer + a new
//      question (prefix reuse within a conversation);
//   c  priority mix: short urgent questions (priority 0) and a low-priority
//      long batch job (priority 3) that the urgent ones preempt;
//   d  random letters (no reuse);
//   e  many applications: 24 system prompts, a few popular and a long tail
//      (Zipf), each with a short question after it: the working set of a
//      fleet, larger than one small daemon's tiers hold (prefix reuse
//      across users and, with the remote tier, across daemons);
//   f  long documents: a shared preamble (an eighth of the context), then one
//      of an ever-growing set of long documents filling most of the rest,
//      then a short question. Half the arrivals bring a new document; the
//      others return to one already read, a recent one or any, so a run
//      pushes a stream of distinct blocks down to L3 and brings them back
//      up (long shared prefixes: the tiers in gigabytes, docs/bench.md).
//
// Thread-safety: none; the load generator calls it from its one I/O thread.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kvtier::bench {

struct WorkItem {
  char kind = 'd';  // 'a' .. 'f'
  std::string prompt;
  int max_tokens = 16;
  int priority = 0;
  float temperature = 0;  // 0 = greedy
  std::uint64_t seed = 0;
  int chat = -1;       // workload b: which conversation; -1 otherwise
  int turn = 0;        // workload b: 0 for the opening turn
  bool batch = false;  // workload c: the long low-priority job
  long document = -1;  // workload f: which document; -1 otherwise
};

// Whether a model of `vocab_size` tokens reads GPT-2's BPE, where each word
// of workload f's vocabulary, with its leading space, is one token.
inline bool gpt2_bpe_vocab(int vocab_size) { return vocab_size == 50257; }

class Workload {
 public:
  // `kinds`: the mix, each arrival picks one of them uniformly ("abc" runs a,
  // b and c in equal shares). `context`: the model's positions.
  // `word_tokens`: the model reads GPT-2's BPE (gpt2_bpe_vocab), so workload
  // f counts a word as a token; otherwise it counts characters.
  Workload(std::string kinds, std::uint64_t seed, int context = 256, bool word_tokens = false);

  // The request for the next arrival.
  WorkItem next();

  // Tells a chat (workload b) its turn is answered: the next turn extends
  // prompt + answer. `ok` false (failed request) restarts the conversation.
  void answered(const WorkItem& item, const std::string& answer, bool ok);

  // Chats waiting for an answer now.
  int busy_chats() const;

 private:
  struct Chat {
    std::string text;  // the conversation so far
    int turns = 0;
    bool busy = false;
  };

  WorkItem shared_prompt();
  WorkItem chat_turn();
  WorkItem priority_mix();
  WorkItem random_prompt();
  WorkItem application_prompt();
  WorkItem document_prompt();
  std::string question();
  // Words from `rng` in sentences, until `budget` tokens (or characters)
  // are spent.
  std::string words(std::mt19937_64& rng, int budget) const;
  std::string document(long index) const;
  std::uint64_t next_seed() { return seed_counter_++; }

  std::string kinds_;
  std::mt19937_64 rng_;
  int context_;
  std::vector<Chat> chats_;
  std::uint64_t seed_counter_ = 1;
  std::uint64_t seed_;
  bool word_tokens_;
  std::string preamble_;  // workload f's shared start
  long documents_ = 0;    // workload f's documents so far
};

// Splits "a,b,c" or "abc" into "abc"; nullopt names nothing valid (letters
// a..f).
std::optional<std::string> parse_kinds(const std::string& spec);

}  // namespace kvtier::bench

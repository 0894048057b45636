// A conversation with a nanochat model through the scheduler and its tiers:
// every turn resends every turn before it, as a chat client does. For each
// turn, the time to its first token with the earlier turns cached in L1,
// in L2 and in L3 (the tiers above flushed down first), against cold (a
// cache salt of its own), and whether the turn gave the same first token
// from L1 as cold.
// The prefix is loaded from each tier as held (the cost model's
// load-or-recompute choice is pinned to loading, as tier_bench pins it), so
// each row measures its tier. Then a prompt whose prefix fills the context,
// from L3: the bytes it read against the whole blocks' (sliding windows).
//
// A turn is nanochat's render of a user message (<|user_start|> text
// <|user_end|> <|assistant_start|>) and the model's greedy reply closed by
// <|assistant_end|>; the text is random token ids (the cost does not depend
// on what they say). Prints figures and ratios; asserts nothing.
//
//   build/bench/conversation_bench [--model DIR | --d20 [--dir FOLDER]]
//       [--turns 10] [--user-tokens 60] [--reply 48]
// --model: a nanochat model folder (default the bundled models/fortunes-chat);
// --d20: a d20-shaped random G5 model written to a temp folder (or --dir,
// kept) as bench/nanochat_bench writes it. The L3 store goes in a temp
// folder, removed after.
#include <omp.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/machine_peaks.h"
#include "bench/random_nanochat.h"
#include "bench/ttft.h"
#include "engine/model/model.h"
#include "engine/scheduling/scheduler.h"

namespace {

namespace fs = std::filesystem;
using namespace kvtier;
using kvtier::bench::random_tokens;
using kvtier::bench::time_to_first_token;
using kvtier::bench::ttft_request;

constexpr int kThreads = 2;
constexpr int kPage = 16;
// The rows of a turn: the earlier turns held in L1, L2, L3, then cold.
constexpr int kRows = 4;

// The chat markers' ids: the tokenizer's, or for a model folder without
// one (--d20) the vocabulary's last ids.
struct Markers {
  int bos, user_start, user_end, assistant_start, assistant_end;
};
Markers markers_of(const ModelConfig& c) {
  auto id = [&](const char* text, int fallback) {
    return special_token_id(c.tokenizer.special_tokens, text).value_or(fallback);
  };
  const int V = c.vocab_size;
  return {id("<|bos|>", V - 9), id("<|user_start|>", V - 8), id("<|user_end|>", V - 7),
          id("<|assistant_start|>", V - 6), id("<|assistant_end|>", V - 5)};
}

// A prompt whose prefix fills the context but for its last block, that
// prefix cached in L3 alone: its time to first token against cold, and the
// bytes the L3 hit read against the whole blocks' (a short-window layer
// reads only the blocks within its window of the first query: the rest of
// its bytes stay on the disk). The same first token as cold, or NO.
void fill_the_context(Scheduler& s, const ModelConfig& mc, std::size_t block_bytes) {
  const int prefix = (mc.block_size / kPage - 1) * kPage;
  std::vector<int> text = random_tokens(prefix + 2 * kPage, mc.vocab_size - 9, 7);
  auto prompt = [&](int suffix) {
    std::vector<int> p(text.begin(), text.begin() + prefix);
    p.insert(p.end(), text.begin() + prefix + suffix * kPage,
             text.begin() + prefix + suffix * kPage + kPage / 2);
    return p;
  };
  // Cold, under a salt of its own; then the prefix cached by another
  // suffix, flushed down to L3; then the cold prompt from there.
  const auto [cold_s, cold_token] = time_to_first_token(s, ttft_request(prompt(0), 1, "fill"));
  time_to_first_token(s, ttft_request(prompt(1), 1));
  for (Tier t : {Tier::kL1, Tier::kL2}) {
    s.cache()->drain();
    s.cache()->flush(t);
  }
  s.cache()->drain();
  const TierStats before = s.cache()->stats().tier[Tier::kL3];
  const auto [l3_s, l3_token] = time_to_first_token(s, ttft_request(prompt(0), 1));
  const TierStats after = s.cache()->stats().tier[Tier::kL3];
  const long read = after.bytes_out - before.bytes_out;
  const long whole = static_cast<long>(prefix / kPage) * static_cast<long>(block_bytes);
  std::printf("\n== a prefix that fills the context: %d tokens, from L3\n", prefix);
  std::printf(
      "  L3 %.1f ms, cold %.1f ms (%.1fx); read %.1f of %.1f MB of whole blocks (%.2fx), "
      "skipped %.1f MB; same first token: %s\n",
      l3_s * 1e3, cold_s * 1e3, cold_s / l3_s, read / 1e6, whole / 1e6,
      static_cast<double>(read) / static_cast<double>(whole),
      (after.bytes_skipped - before.bytes_skipped) / 1e6, l3_token == cold_token ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::use_best_openblas_kernels(argv);
  fs::path model_dir = fs::path(__FILE__).parent_path().parent_path() / "models/fortunes-chat";
  fs::path d20_dir;
  bool d20 = false, keep = false;
  int turns = 10, user_tokens = 60, reply = 48;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool more = i + 1 < argc;
    if (arg == "--model" && more) {
      model_dir = argv[++i];
    } else if (arg == "--d20") {
      d20 = true;
    } else if (arg == "--dir" && more) {
      d20_dir = argv[++i];
      keep = true;
    } else if (arg == "--turns" && more) {
      turns = std::atoi(argv[++i]);
    } else if (arg == "--user-tokens" && more) {
      user_tokens = std::atoi(argv[++i]);
    } else if (arg == "--reply" && more) {
      reply = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--model DIR | --d20 [--dir FOLDER]] [--turns N] "
                   "[--user-tokens N] [--reply N]\n",
                   argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(kThreads);
  const fs::path work =
      fs::temp_directory_path() / ("conversation_bench." + std::to_string(getpid()));
  fs::create_directories(work);
  if (d20) {
    if (d20_dir.empty()) d20_dir = work / "d20";
    fs::create_directories(d20_dir);
    if (!fs::exists(d20_dir / "model.safetensors")) {
      std::printf("writing a d20-shaped random G5 model to %s...\n", d20_dir.c_str());
      if (auto ok = bench::write_random_nanochat(d20_dir, bench::NanochatShape::d20(), 1); !ok) {
        std::fprintf(stderr, "%s\n", ok.error().c_str());
        return 1;
      }
    }
    model_dir = d20_dir;
  }
  const std::string name = d20 ? "d20-shaped, random" : model_dir.filename().string();
  const int history_max = turns * (user_tokens + reply + 4) + 1;
  // A nanochat model serves up to 10x its sequence_len (its rotary table's
  // reach; beyond sequence_len every layer slides): a copy of the folder
  // whose config asks for the context the conversation needs.
  {
    std::ifstream in(model_dir / "config.json");
    auto config = nlohmann::json::parse(in, nullptr, false);
    if (config.is_object() && config.value("format", "") == "nanochat" &&
        config.value("context", config.value("sequence_len", 0)) < history_max + reply) {
      const fs::path copy = work / "model";
      fs::create_directories(copy);
      for (const auto& entry : fs::directory_iterator(model_dir))
        if (entry.path().filename() != "config.json")
          fs::create_symlink(entry.path(), copy / entry.path().filename());
      config["context"] = history_max + reply;
      std::ofstream(copy / "config.json") << config.dump(2);
      std::printf("serving %s with a context of %d (its sequence_len is %d)\n", model_dir.c_str(),
                  history_max + reply, config.value("sequence_len", 0));
      model_dir = copy;
    }
  }
  auto model = Model::load(model_dir);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().c_str());
    return 1;
  }
  const ModelConfig& mc = (*model)->config();
  if (history_max + reply > mc.block_size) {
    std::fprintf(stderr, "%d turns of %d + %d tokens exceed the model's context of %d\n", turns,
                 user_tokens, reply, mc.block_size);
    return 2;
  }
  const std::size_t block_bytes = (*model)->kv_layout(kPage).block_bytes();
  SchedulerConfig c = bench::ttft_scheduler_config(kPage);
  // L1 holds the conversation and a cold copy of it; L2 and L3 the whole
  // conversation.
  c.max_kv_tokens = 2 * history_max + 4 * kPage;
  c.token_budget = history_max + kPage;
  const std::size_t history_blocks = static_cast<std::size_t>(history_max) / kPage + 2;
  c.cache.l2_bytes = 2 * history_blocks * block_bytes;
  c.cache.l3_path = (work / "l3").string();
  c.cache.l3_bytes = 4 * history_blocks * block_bytes;
  auto made = Scheduler::create(**model, nullptr, c);
  if (!made) {
    std::fprintf(stderr, "cannot build the scheduler: %s\n", made.error().c_str());
    return 1;
  }
  Scheduler& s = **made;
  for (const std::string& w : s.cache()->warnings()) std::printf("note: %s\n", w.c_str());
  s.cache()->cost_model().pin({});

  const Markers m = markers_of(mc);
  std::printf("\n== a %d-turn conversation, %s (%d layers, %d wide), block %zu bytes, %d threads\n",
              turns, name.c_str(), mc.n_layer, mc.n_embd, block_bytes, kThreads);
  std::printf("  %4s %8s %10s %10s %10s %10s %9s %9s %9s %5s\n", "turn", "history", "L1 ms",
              "L2 ms", "L3 ms", "cold ms", "cold/L1", "cold/L2", "cold/L3", "same");
  std::vector<int> history = {m.bos};
  for (int t = 0; t < turns; ++t) {
    // The turn's user message; the rows measured through L2 and L3 send
    // messages of their own, so that no row finds the one before it left
    // its message's blocks in the cache: each finds the earlier turns only.
    auto prompt_of = [&](int variant) {
      std::vector<int> p = history;
      p.push_back(m.user_start);
      // Text ids below the markers, from a stream of the message's own.
      for (int id :
           random_tokens(user_tokens, std::min(m.bos, mc.vocab_size - 9), 100 + 4 * t + variant))
        p.push_back(id);
      p.push_back(m.user_end);
      p.push_back(m.assistant_start);
      return p;
    };
    const std::vector<int> prompt = prompt_of(0);

    std::array<double, kRows> ms{};
    std::array<int, kRows> first{};
    // Cold first (its own salt; the turn's message), then L3, L2, L1: each
    // hit brings the earlier turns up into L1, so the tiers above the one
    // measured are flushed down before it; the last (L1, the turn's
    // message) generates the reply the next turn resends.
    for (int row = kRows - 1; row >= 0; --row) {
      s.cache()->drain();
      for (int above = 0; above < row && row < kRows - 1; ++above)
        s.cache()->flush(static_cast<Tier>(above));
      s.cache()->drain();
      if (row > 0) {
        const bool cold = row == kRows - 1;
        const auto [took, token] =
            time_to_first_token(s, ttft_request(cold ? prompt : prompt_of(row), 1,
                                                cold ? "cold-" + std::to_string(t) : ""));
        ms[row] = took * 1e3;
        first[row] = token;
        continue;
      }
      const auto start = std::chrono::steady_clock::now();
      const RequestId id = *s.submit(ttft_request(prompt, reply));
      std::vector<int> out;
      bool first_seen = false;
      while (s.has_work()) {
        for (const RequestEvent& e : s.step().events) {
          if (e.id != id) continue;
          if (!first_seen && !e.tokens.empty()) {
            ms[0] = bench::seconds_since(start) * 1e3;
            first[0] = e.tokens.front();
            first_seen = true;
          }
          out.insert(out.end(), e.tokens.begin(), e.tokens.end());
        }
      }
      history = prompt;
      history.insert(history.end(), out.begin(), out.end());
      if (history.back() != m.assistant_end) history.push_back(m.assistant_end);
    }
    const bool same = first[0] == first[kRows - 1];  // the same prompt, cached and cold
    std::printf("  %4d %8zu %10.1f %10.1f %10.1f %10.1f %8.1fx %8.1fx %8.1fx %5s\n", t + 1,
                prompt.size() - user_tokens - 3, ms[0], ms[1], ms[2], ms[3], ms[3] / ms[0],
                ms[3] / ms[1], ms[3] / ms[2], same ? "yes" : "NO");
  }
  std::printf("  (history: the tokens of the earlier turns each prompt resends)\n");
  fill_the_context(s, mc, block_bytes);
  std::printf("peak RSS %.2f GB\n", bench::peak_rss_bytes() / 1e9);
  made->reset();
  fs::remove_all(work);
  if (keep) std::printf("kept %s\n", d20_dir.c_str());
  return 0;
}

// Black-box tests of kvtierctl (ctl/) against a real daemon: its tokens
// must equal the engine's in-process result, its failures must be one line
// with the documented exit code. The Python client's are in
// python_client_test.cpp.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_test_util.h"
#include "engine/build_info.h"
#include "engine/cache/tier.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;

class CtlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kCtlPath))
        << kCtlPath << " is missing: build the kvtierctl target too";
  }
  ProcessResult ctl(std::vector<std::string> args, std::vector<std::string> env = {},
                    const std::filesystem::path& in = "/dev/null") {
    args.insert(args.begin(), kCtlPath.string());
    return run_process(std::move(args), scratch_.path(), environment_with(env), in);
  }
  test_util::TempDir scratch_;
};

bool one_line(const std::string& text) {
  return !text.empty() && text.find('\n') == text.size() - 1;
}

// A kvtierctl left running (top), its stdout read through a pipe as it
// comes; killed and reaped at the end.
class RunningCtl {
 public:
  explicit RunningCtl(std::vector<std::string> args) {
    args.insert(args.begin(), kCtlPath.string());
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    auto child = util::spawn_child(args, {.stdout_fd = fds[1]});
    ::close(fds[1]);
    fd_ = fds[0];
    if (child)
      child_ = std::move(*child);
    else
      ADD_FAILURE() << child.error();
  }
  ~RunningCtl() {
    (void)child_.stop(std::chrono::milliseconds(0));  // SIGKILL, then its pipe
    ::close(fd_);
  }
  RunningCtl(const RunningCtl&) = delete;
  RunningCtl& operator=(const RunningCtl&) = delete;

  // Reads on until a line with `needle` arrives after the last one found;
  // false on EOF or timeout.
  bool wait_line(const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    for (;;) {
      if (auto at = out_.find(needle, seen_); at != std::string::npos) {
        if (auto nl = out_.find('\n', at); nl != std::string::npos) {
          seen_ = nl + 1;
          return true;
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return false;
      out_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  const std::string& out() const { return out_; }

 private:
  util::ChildProcess child_;
  int fd_ = -1;
  std::string out_;
  std::size_t seen_ = 0;
};

TEST_F(CtlTest, GenerateMatchesTheEngineAndStreamsTheSameText) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const Generation want = reference("Q: Why", 30, 0.8f, 9);
  auto json_run = ctl({"--socket", d.socket_path(), "generate", "--prompt", "Q: Why",
                       "--max-tokens", "30", "--temperature", "0.8", "--seed", "9", "--json"});
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  const auto lines = json_run.out_lines();
  ASSERT_FALSE(lines.empty());
  const json result = json::parse(lines.back());
  EXPECT_EQ(result["tokens"].get<std::vector<int>>(), want.tokens);

  // Text mode, streamed, with the socket from the environment.
  auto text_run = ctl({"generate", "--prompt", "Q: Why", "--max-tokens", "30", "--temperature",
                       "0.8", "--seed", "9", "--stream"},
                      {"KVTIER_SOCKET=" + d.socket_path()});
  ASSERT_EQ(text_run.exit_code, 0) << text_run.err;
  EXPECT_EQ(text_run.out, "Q: Why" + want.text + "\n");

  // Several samples: each is printed, sample 0 first.
  auto samples = ctl({"--socket", d.socket_path(), "generate", "--prompt", "Q: Why", "--max-tokens",
                      "30", "--temperature", "0.8", "--seed", "9", "-n", "2"});
  ASSERT_EQ(samples.exit_code, 0) << samples.err;
  EXPECT_TRUE(samples.out.starts_with("Q: Why" + want.text + "\n--- sample 1 ---\n"))
      << samples.out;
  shutdown(d);
}

// The number after `tier` in each of chat --stats's lines ("cached: l1 16, ...").
std::vector<int> cached_per_turn(const std::string& err, const std::string& tier) {
  std::vector<int> out;
  for (std::size_t at = err.find("(cached: "); at != std::string::npos;
       at = err.find("(cached: ", at + 1)) {
    const std::size_t t = err.find(tier + " ", at);
    out.push_back(t == std::string::npos ? -1 : std::atoi(err.c_str() + t + tier.size() + 1));
  }
  return out;
}

TEST_F(CtlTest, ChatHoldsAConversationWhoseEarlierTurnsComeFromTheCache) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  // One message: the bundled model's template (Q:/A:), as generate renders it by hand.
  const std::string question = "Why did the chicken cross the road, and what did it find there?";
  auto one =
      ctl({"--socket", sock, "chat", "-p", question, "--temperature", "0", "--max-tokens", "12"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto by_hand = ctl({"--socket", sock, "generate", "--prompt", "Q: " + question + "\nA:", "--stop",
                      "\nQ:", "--temperature", "0", "--max-tokens", "12", "--json"});
  ASSERT_EQ(by_hand.exit_code, 0) << by_hand.err;
  const json want = json::parse(by_hand.out_lines().back());
  EXPECT_EQ(one.out, "Assistant: " + want["text"].get<std::string>() + "\n");

  // Turns from stdin: each resends the conversation, whose earlier turns the
  // cache holds; "clear" starts again, "quit" ends.
  const auto in = scratch_.path() / "turns.txt";
  std::ofstream(in) << question << "\nAnd then?\nclear\n" << question << "\nquit\nnever sent\n";
  auto turns = ctl(
      {"--socket", sock, "chat", "--temperature", "0", "--max-tokens", "12", "--stats"}, {}, in);
  ASSERT_EQ(turns.exit_code, 0) << turns.err;
  EXPECT_NE(turns.out.find("Assistant: " + want["text"].get<std::string>() + "\n"),
            std::string::npos)
      << turns.out;
  EXPECT_NE(turns.out.find("(a new conversation)"), std::string::npos) << turns.out;
  const std::vector<int> l1 = cached_per_turn(turns.err, "l1");
  ASSERT_EQ(l1.size(), 3u) << turns.err;
  EXPECT_GT(l1[1], 0) << "the second turn's prefix is the first's: " << turns.err;
  EXPECT_GT(l1[2], 0) << "the first turn again: " << turns.err;
  shutdown(d);
}

TEST_F(CtlTest, TiersAndCacheCommands) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  const std::string prompt = "Q: What is the difference between a cat and a lion? A: ";
  const int cacheable = (static_cast<int>(prompt.size()) - 1) / 16 * 16;

  auto tiers = ctl({"--socket", sock, "tiers"});
  ASSERT_EQ(tiers.exit_code, 0) << tiers.err;
  EXPECT_TRUE(test_util::contains(tiers.out, "l1     yes")) << tiers.out;
  EXPECT_TRUE(test_util::contains(tiers.out, "l3     no")) << tiers.out;
  EXPECT_TRUE(test_util::contains(tiers.out, "load or recompute")) << tiers.out;
  auto tiers_json = ctl({"--socket", sock, "tiers", "--json"});
  ASSERT_EQ(tiers_json.exit_code, 0) << tiers_json.err;
  EXPECT_TRUE(json::parse(tiers_json.out)["tiers"].contains("l2"));

  auto warm = ctl({"--socket", sock, "cache", "warm", prompt});
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  EXPECT_TRUE(test_util::contains(warm.out, "warmed: " + std::to_string(cacheable))) << warm.out;
  auto lookup = ctl({"--socket", sock, "cache", "lookup", prompt, "--json"});
  ASSERT_EQ(lookup.exit_code, 0) << lookup.err;
  EXPECT_EQ(json::parse(lookup.out)["tiers"]["l1"], cacheable);
  // The same prompt as token ids (the bundled model's characters), in
  // another namespace: nothing cached there.
  auto ids = json::parse(lookup.out)["prompt_tokens"].get<int>();
  EXPECT_EQ(ids, static_cast<int>(prompt.size()));
  auto salted = ctl({"--socket", sock, "cache", "lookup", prompt, "--cache-salt", "b", "--json"});
  EXPECT_EQ(json::parse(salted.out)["cached_tokens"], 0);

  auto pin = ctl({"--socket", sock, "cache", "pin", prompt});
  ASSERT_EQ(pin.exit_code, 0) << pin.err;
  EXPECT_EQ(pin.out, "pinned " + std::to_string(cacheable / 16) + " blocks (" +
                         std::to_string(cacheable) + " tokens)\n");
  auto tree = ctl({"--socket", sock, "cache", "tree"});
  ASSERT_EQ(tree.exit_code, 0) << tree.err;
  EXPECT_TRUE(test_util::contains(tree.out, prompt.substr(0, 16))) << tree.out;
  EXPECT_EQ(ctl({"--socket", sock, "cache", "unpin", prompt}).exit_code, 0);
  auto flush = ctl({"--socket", sock, "cache", "flush", "l1"});
  ASSERT_EQ(flush.exit_code, 0) << flush.err;
  EXPECT_TRUE(test_util::contains(flush.out, "dropped blocks: l1 ")) << flush.out;
  EXPECT_EQ(ctl({"--socket", sock, "cache", "flush", "l9"}).exit_code, 2);
  EXPECT_EQ(ctl({"--socket", sock, "cache", "lookup"}).exit_code, 2);

  auto gen = ctl({"--socket", sock, "generate", "--prompt", prompt + "one", "--max-tokens", "5",
                  "--temperature", "0", "--cache-salt", "", "--eviction", "none", "--json"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const json result = json::parse(gen.out_lines().back());
  EXPECT_EQ(result["cached_tokens"]["l2"], cacheable);
  EXPECT_EQ(result["tokens"].get<std::vector<int>>(), reference(prompt + "one", 5, 0.0f, 0).tokens);
  auto bad = ctl({"--socket", sock, "generate", "--prompt", "x", "--eviction", "most"});
  EXPECT_EQ(bad.exit_code, 4);
  EXPECT_TRUE(one_line(bad.err)) << bad.err;

  auto top = ctl({"--socket", sock, "top", "--once"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_TRUE(test_util::contains(top.out, "tiers    prefix cache")) << top.out;
  shutdown(d);
}

TEST_F(CtlTest, ExitCodesAndOneLineErrors) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  // 2: usage.
  EXPECT_EQ(ctl({"--socket", d.socket_path(), "no-such-command"}).exit_code, 2);
  EXPECT_EQ(ctl({"--socket", d.socket_path(), "config", "set", "token_budget"}).exit_code, 2);
  auto help = ctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(test_util::contains(help.out, "3 kvtierd unreachable"));
  // 3: nobody at the socket.
  auto unreachable = ctl({"--socket", (scratch_.path() / "none.sock").string(), "stats"});
  EXPECT_EQ(unreachable.exit_code, 3);
  EXPECT_TRUE(one_line(unreachable.err)) << unreachable.err;
  EXPECT_TRUE(test_util::contains(unreachable.err, "none.sock"));
  // 4: the daemon refused the request.
  auto refused = ctl({"--socket", d.socket_path(), "config", "set", "page_size", "32"});
  EXPECT_EQ(refused.exit_code, 4);
  EXPECT_TRUE(one_line(refused.err)) << refused.err;
  EXPECT_TRUE(test_util::contains(refused.err, "-32602"));
  EXPECT_TRUE(test_util::contains(refused.err, "page_size"));
  auto bad_generate =
      ctl({"--socket", d.socket_path(), "generate", "--prompt", "a", "--top-p", "5"});
  EXPECT_EQ(bad_generate.exit_code, 4);
  EXPECT_TRUE(one_line(bad_generate.err)) << bad_generate.err;
  shutdown(d);
}

TEST_F(CtlTest, ConfigGetAndSet) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  // token_budget 0 by default: the daemon chose from passes it measured,
  // and says what and why.
  auto chosen = ctl({"--socket", d.socket_path(), "config", "get", "--json"});
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  const json before = json::parse(chosen.out);
  EXPECT_EQ(before["token_budget"]["value"], 0);
  EXPECT_GE(before["token_budget"]["chosen"].get<int>(), 8) << "at least max_batch_size";
  EXPECT_GE(before["mixed_prefill_tokens"]["chosen"].get<int>(), 1);
  EXPECT_TRUE(test_util::contains(before["token_budget"].value("why", ""), "in passes of"));
  auto shown = ctl({"--socket", d.socket_path(), "config", "get", "token_budget"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(test_util::contains(shown.out, "0 (" + before["token_budget"]["chosen"].dump() + ")"))
      << shown.out;
  EXPECT_TRUE(test_util::contains(shown.out, "token budgets: token_budget ")) << shown.out;
  auto set = ctl(
      {"--socket", d.socket_path(), "config", "set", "token-budget", "32", "policy", "priority"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_TRUE(test_util::contains(set.out, "token_budget = 32"));
  EXPECT_TRUE(test_util::contains(set.out, "policy = \"priority\""));
  auto get = ctl({"--socket", d.socket_path(), "config", "get", "--json"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  const json config = json::parse(get.out);
  EXPECT_EQ(config["token_budget"]["value"], 32);
  EXPECT_EQ(config["policy"]["value"], "priority");
  auto table = ctl({"--socket", d.socket_path(), "config", "get", "page_size", "token_budget"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(test_util::contains(table.out, "restart to change"));  // page_size
  EXPECT_TRUE(test_util::contains(table.out, "runtime"));            // token_budget
  EXPECT_EQ(ctl({"--socket", d.socket_path(), "config", "get", "nope"}).exit_code, 4);
  shutdown(d);
}

TEST_F(CtlTest, TopOncePrintsOneFrame) {
  Daemon d({"--max-batch-size", "6"});
  ASSERT_TRUE(d.wait_ready());
  ASSERT_EQ(ctl({"--socket", d.socket_path(), "generate", "--prompt", "x", "--max-tokens", "5"})
                .exit_code,
            0);
  auto top = ctl({"--socket", d.socket_path(), "top", "--once"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_TRUE(test_util::contains(top.out, "batch    0 / 6"));
  EXPECT_TRUE(test_util::contains(top.out, "completed 1"));
  EXPECT_TRUE(test_util::contains(top.out, "tokens 5"));
  EXPECT_TRUE(test_util::contains(top.out, "KV "));
  EXPECT_EQ(top.out.find('\x1b'), std::string::npos);  // no terminal codes in --once
  shutdown(d);
}

TEST_F(CtlTest, UsageErrorsAreOneLineAndHelpIsWhole) {
  // No daemon: a bad command line is refused before any connection.
  const std::vector<std::vector<std::string>> bad = {
      {"generate", "--prompt", "x", "--max-tokens", "abc"},
      {"--frobnicate", "stats"},
      {"stats", "--frobnicate"},
      {"generate", "--prompt"},
      {"no-such-command"},
      {"config", "set", "token_budget"},
      {"cache", "flush", "l9"},
      {"top", "--interval", "0"},
      {"generate", "--prompt", "x", "--tokens", "1,2"},
  };
  for (const auto& args : bad) {
    auto r = ctl(args);
    EXPECT_EQ(r.exit_code, 2) << args.front();
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_TRUE(r.err.starts_with("kvtierctl: ")) << r.err;
    EXPECT_TRUE(test_util::contains(r.err, "--help")) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_TRUE(test_util::contains(ctl(bad.front()).err, "--max-tokens"));
  auto help = ctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* command : {"generate", "cancel", "call", "top"})
    EXPECT_TRUE(test_util::contains(help.out, command));
  auto generate_help = ctl({"generate", "--help"});
  EXPECT_EQ(generate_help.exit_code, 0);
  EXPECT_TRUE(test_util::contains(generate_help.out, "--prompt-file"));
  auto version = ctl({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out, version_text("kvtierctl") + "\n");
}

TEST_F(CtlTest, HealthIsOneLineAndStatsATable) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  ASSERT_EQ(ctl({"-s", sock, "generate", "--prompt", "x", "--max-tokens", "5"}).exit_code, 0);

  auto health = ctl({"-s", sock, "health"});
  ASSERT_EQ(health.exit_code, 0) << health.err;
  EXPECT_TRUE(one_line(health.out)) << health.out;
  const json raw = json::parse(ctl({"-s", sock, "health", "--json"}).out);
  EXPECT_TRUE(health.out.starts_with(raw["status"].get<std::string>() + "  ")) << health.out;
  EXPECT_TRUE(test_util::contains(health.out, "device " + raw["device"].get<std::string>()));
  EXPECT_TRUE(test_util::contains(health.out,
                                  std::to_string(raw["model"]["n_layer"].get<int>()) + " layers"));
  EXPECT_TRUE(test_util::contains(health.out, raw["version"].get<std::string>())) << health.out;
  EXPECT_TRUE(test_util::contains(health.out, "model fortunes-char: ")) << health.out;

  auto stats = ctl({"-s", sock, "stats"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_FALSE(json::accept(stats.out)) << stats.out;
  EXPECT_EQ(stats.out.find('{'), std::string::npos) << stats.out;  // no JSON inside either
  EXPECT_TRUE(std::regex_search(stats.out, std::regex("\nrequests_completed +1\n"))) << stats.out;
  EXPECT_TRUE(std::regex_search(stats.out, std::regex("\ntokens_generated +5\n"))) << stats.out;
  EXPECT_TRUE(test_util::contains(stats.out, "# cache\n")) << stats.out;
  EXPECT_TRUE(test_util::contains(stats.out, "hit%")) << stats.out;  // the tier table
  EXPECT_TRUE(test_util::contains(stats.out, "load or recompute")) << stats.out;
  shutdown(d);
}

// The value in `column` of the tier table's row for `tier` (the table's
// header names the columns; each cell is one word).
std::string tier_cell(const std::string& table, const std::string& tier,
                      const std::string& column) {
  std::istringstream lines(table);
  std::vector<std::string> header;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> cells{std::istream_iterator<std::string>(words), {}};
    if (!cells.empty() && cells[0] == "tier") header = cells;
    if (header.empty() || cells.empty() || cells[0] != tier) continue;
    for (std::size_t i = 0; i < header.size() && i < cells.size(); ++i)
      if (header[i] == column) return cells[i];
  }
  return "";
}

TEST_F(CtlTest, TiersShowHitRates) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  const std::string prompt = "Q: What is the difference between a cat and a lion? A: ";
  ASSERT_EQ(ctl({"-s", sock, "cache", "warm", prompt}).exit_code, 0);
  ASSERT_EQ(ctl({"-s", sock, "generate", "--prompt", prompt, "--max-tokens", "3"}).exit_code, 0);
  auto tiers = ctl({"-s", sock, "tiers"});
  ASSERT_EQ(tiers.exit_code, 0) << tiers.err;
  const std::string rate = tier_cell(tiers.out, "l1", "hit%");
  ASSERT_TRUE(std::regex_match(rate, std::regex("[0-9]+\\.[0-9]"))) << tiers.out;
  EXPECT_GT(std::stod(rate), 0.0);
  EXPECT_LE(std::stod(rate), 100.0);
  shutdown(d);
}

TEST_F(CtlTest, TopFitsTheScreen) {
  ::unsetenv("COLUMNS");  // only the runs below that set it
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  ASSERT_EQ(
      ctl({"-s", sock, "cache", "warm", "Q: What is the difference between a cat?"}).exit_code, 0);
  for (const auto& [env, width] : std::vector<std::pair<std::vector<std::string>, std::size_t>>{
           {{}, 80}, {{"COLUMNS=60"}, 60}, {{"COLUMNS=200"}, 200}}) {
    auto top = ctl({"-s", sock, "top", "--once"}, env);
    ASSERT_EQ(top.exit_code, 0) << top.err;
    EXPECT_TRUE(test_util::contains(top.out, "hit%")) << top.out;
    for (const std::string& line : top.out_lines()) EXPECT_LE(line.size(), width) << line;
  }
  // A wide screen has room for every column.
  EXPECT_TRUE(
      test_util::contains(ctl({"-s", sock, "top", "--once"}, {"COLUMNS=200"}).out, "io_err"));
  shutdown(d);
}

TEST_F(CtlTest, TopSurvivesADaemonRestart) {
  const std::string sock = (scratch_.path() / "k.sock").string();
  auto first = std::make_unique<Daemon>(std::vector<std::string>{"--socket", sock});
  ASSERT_TRUE(first->wait_ready());
  RunningCtl top({"-s", sock, "top", "--interval", "0.1"});
  ASSERT_TRUE(top.wait_line("batch    ")) << top.out();
  shutdown(*first);
  ASSERT_TRUE(top.wait_line("kvtierd unreachable at " + sock + ", retrying...")) << top.out();
  Daemon second({"--socket", sock});
  ASSERT_TRUE(second.wait_ready());
  EXPECT_TRUE(top.wait_line("batch    ")) << top.out();
  shutdown(second);
  // --once does not wait for a daemon.
  auto once = ctl({"-s", sock, "top", "--once"});
  EXPECT_EQ(once.exit_code, 3);
  EXPECT_TRUE(one_line(once.err)) << once.err;
}

TEST_F(CtlTest, CancelByRequestId) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  auto unknown = ctl({"-s", sock, "cancel", "12345"});
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_TRUE(one_line(unknown.err)) << unknown.err;
  EXPECT_TRUE(test_util::contains(unknown.err, "-32602")) << unknown.err;

  // A long request (every sample to the context's end) is still running
  // when kvtierctl, started at its first token, cancels it.
  auto c = d.connect();
  json params = generate_params("Wait", 250, 0.8f, 3, true);
  params["n"] = 8;
  params["ignore_eos"] = true;
  ASSERT_TRUE(c->send(request(1, "generate", params)));
  auto note = c->read();
  ASSERT_TRUE(note && note->contains("params"));
  const json id = (*note)["params"]["id"];
  auto cancel = ctl({"-s", sock, "cancel", id.dump(), "--json"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(json::parse(cancel.out)["cancelled"], id);
  std::optional<json> response;
  while ((response = c->read()) && !response->contains("id")) {
  }
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ((*response)["result"]["finish_reason"], "cancelled");
  shutdown(d);
}

TEST_F(CtlTest, GenerateTakesItsPromptFromAFileStdinOrTokenIds) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  const std::string prompt = "Q: Why is the sky\nA:";
  const std::vector<std::string> sampling = {"--max-tokens", "20", "--seed", "5"};
  auto gen = [&](std::vector<std::string> args, const std::filesystem::path& in = "/dev/null") {
    args.insert(args.begin(), {"-s", sock, "generate"});
    args.insert(args.end(), sampling.begin(), sampling.end());
    return ctl(args, {}, in);
  };
  auto want = gen({"--prompt", prompt});
  ASSERT_EQ(want.exit_code, 0) << want.err;
  const auto file = scratch_.write("prompt.txt", prompt);
  auto from_file = gen({"--prompt-file", file.string()});
  EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(from_file.out, want.out);
  auto from_stdin = gen({}, file);
  EXPECT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  EXPECT_EQ(from_stdin.out, want.out);
  auto from_dash = gen({"--prompt-file", "-"}, file);
  EXPECT_EQ(from_dash.exit_code, 0) << from_dash.err;
  EXPECT_EQ(from_dash.out, want.out);

  // The same prompt as token ids: the same tokens come back.
  auto ids = test_util::bundled_model().tokenizer->encode(prompt);
  ASSERT_TRUE(ids.has_value());
  std::string list;
  for (int t : *ids) list += (list.empty() ? "" : ",") + std::to_string(t);
  auto by_text = gen({"--prompt", prompt, "--json"});
  auto by_ids = gen({"--tokens", list, "--json"});
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.err;
  EXPECT_EQ(json::parse(by_ids.out)["tokens"], json::parse(by_text.out)["tokens"]);

  auto missing = gen({"--prompt-file", (scratch_.path() / "none.txt").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(one_line(missing.err)) << missing.err;
  EXPECT_TRUE(test_util::contains(missing.err, "none.txt")) << missing.err;
  shutdown(d);
}

TEST_F(CtlTest, GenerateSendsOnlyWhatItIsGiven) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string prompt = "A fool";
  auto gen = ctl({"-s", d.socket_path(), "generate", "--prompt", prompt, "--json"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const json result = json::parse(gen.out);
  // The same request with nothing but the prompt and the seed the daemon
  // drew gets the same tokens: the daemon's defaults.
  ASSERT_TRUE(result.contains("seed")) << gen.out;
  const json params = {{"prompt", prompt}, {"seed", result["seed"]}};
  auto c = d.connect();
  auto plain = c->call(request(1, "generate", params));
  ASSERT_TRUE(plain && plain->contains("result"));
  EXPECT_EQ(result["tokens"], (*plain)["result"]["tokens"]);
  // Text mode names the seed, so a run can be replayed with --seed.
  auto text = ctl({"-s", d.socket_path(), "generate", "--prompt", prompt});
  std::smatch seed;
  ASSERT_TRUE(std::regex_search(text.err, seed, std::regex("seed ([0-9]+)"))) << text.err;
  auto again =
      ctl({"-s", d.socket_path(), "generate", "--prompt", prompt, "--seed", seed[1].str()});
  EXPECT_EQ(again.out, text.out);
  shutdown(d);
}

TEST_F(CtlTest, CallPassesAnyMethodThrough) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string sock = d.socket_path();
  auto health = ctl({"-s", sock, "call", "health"});
  ASSERT_EQ(health.exit_code, 0) << health.err;
  auto direct = d.connect()->call(request(1, "health"));
  ASSERT_TRUE(direct.has_value());
  EXPECT_EQ(json::parse(health.out), (*direct)["result"]);
  auto set = ctl({"-s", sock, "call", "config.set", R"({"token_budget": 40})", "--json"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(json::parse(set.out)["changed"]["token_budget"], 40);
  auto unknown = ctl({"-s", sock, "call", "no.such.method"});
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_TRUE(one_line(unknown.err)) << unknown.err;
  EXPECT_TRUE(test_util::contains(unknown.err, "-32601")) << unknown.err;
  auto not_json = ctl({"-s", sock, "call", "cancel", "{id: 1"});
  EXPECT_EQ(not_json.exit_code, 2);
  EXPECT_TRUE(one_line(not_json.err)) << not_json.err;
  shutdown(d);
}

TEST_F(CtlTest, JsonOnEveryCommand) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string prompt = "Q: What is the difference between a cat?";
  const std::vector<std::vector<std::string>> commands = {
      {"generate", "--prompt", "x", "--max-tokens", "3"},
      {"stats"},
      {"health"},
      {"tiers"},
      {"config", "get", "token_budget"},
      {"config", "set", "token_budget", "48"},
      {"cache", "warm", prompt},
      {"cache", "lookup", prompt},
      {"cache", "pin", prompt},
      {"cache", "unpin", prompt},
      {"cache", "tree"},
      {"cache", "flush", "l1"},
      {"top", "--once"},
      {"call", "stats"},
      {"shutdown"},  // last
  };
  for (std::vector<std::string> args : commands) {
    args.insert(args.begin(), {"-s", d.socket_path()});
    args.push_back("--json");
    auto r = ctl(args);
    ASSERT_EQ(r.exit_code, 0) << args[2] << ": " << r.err;
    const auto lines = r.out_lines();
    ASSERT_FALSE(lines.empty()) << args[2];
    EXPECT_TRUE(json::parse(lines.back(), nullptr, false).is_object()) << args[2] << ": " << r.out;
  }
  EXPECT_TRUE(exited_zero(d.wait_exit()));
}

// Every tier of tier.h shows up on every surface, each named from the one
// table (kTierNames): the start-up line, `tiers`, `stats`, /metrics and
// `kvtierctl tiers`; so a tier added there is seen with no edit in the
// daemon or kvtierctl. L3 opens in the daemon's directory; the remote tier
// is asked for at a port where nothing listens, so it shows as unavailable.
TEST_F(CtlTest, EveryTierShowsUpOnEverySurface) {
  if (!test_util::on_path("curl"))
    GTEST_SKIP() << "curl is not installed (scripts/install-deps.sh installs it)";
  Daemon d({"--l3-path", (scratch_.path() / "l3").string(), "--remote", "127.0.0.1:1",
            "--log-level", "info"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  ASSERT_TRUE(d.wait_log("prefix cache on: ")) << d.log();
  const std::string log = d.log();
  const std::string start_line = log.substr(log.find("prefix cache on: "));
  auto c = d.connect();
  const auto tiers = c->call(request(1, "tiers"));
  const auto stats = c->call(request(2, "stats"));
  ASSERT_TRUE(tiers && tiers->contains("result")) << (tiers ? tiers->dump() : "no answer");
  ASSERT_TRUE(stats && stats->contains("result")) << (stats ? stats->dump() : "no answer");
  const ProcessResult metrics =
      run_process({"curl", "-s", "--unix-socket", d.socket_path(), "http://localhost/metrics"},
                  scratch_.path(), environment_with({}));
  ASSERT_EQ(metrics.exit_code, 0) << metrics.err;
  const ProcessResult ctl_tiers = ctl({"--socket", d.socket_path(), "tiers"});
  ASSERT_EQ(ctl_tiers.exit_code, 0) << ctl_tiers.err;

  for (const TierNames& t : kTierNames) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE(test_util::contains(start_line.substr(0, start_line.find('\n')),
                                    std::string(t.label) + " "))
        << start_line;
    EXPECT_TRUE((*tiers)["result"]["tiers"].contains(t.name)) << tiers->dump();
    EXPECT_TRUE((*stats)["result"]["cache"]["tiers"].contains(t.name)) << stats->dump();
    EXPECT_TRUE(test_util::contains(metrics.out,
                                    "kvtier_tier_available{tier=\"" + std::string(t.name) + "\"}"))
        << metrics.out;
    EXPECT_TRUE(test_util::contains(ctl_tiers.out, "\n" + std::string(t.name) + " "))
        << ctl_tiers.out;
  }
  // Asked for and not there: said by its table name and where it was asked to be.
  EXPECT_TRUE(test_util::contains(log, "remote at 127.0.0.1:1 is not available")) << log;
  EXPECT_TRUE(test_util::contains(start_line, "remote unavailable")) << start_line;
  shutdown(d);
}

}  // namespace
}  // namespace kvtier

// Black-box tests of kvtierd's clients against a real daemon: kvtierctl
// (ctl/) and the standard-library Python client (examples/python/). Their
// tokens must equal the engine's in-process result, their failures must be
// one line with the documented exit code.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "daemon_test_util.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;

// Beside kvtierd in the build tree (build/daemon/kvtierd, build/ctl/kvtierctl).
const std::filesystem::path kCtlPath =
    std::filesystem::path(KVTIER_DAEMON_PATH).parent_path().parent_path() / "ctl/kvtierctl";
const std::filesystem::path kPythonClient =
    std::filesystem::path(KVTIER_SOURCE_DIR) / "examples/python/kvtier_client.py";

struct ProcessResult {
  int exit_code = -1;  // -1: killed, or it did not finish in time
  std::string out, err;
  std::vector<std::string> out_lines() const {
    std::vector<std::string> lines;
    std::size_t start = 0;
    for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
      lines.push_back(out.substr(start, nl - start));
    }
    return lines;
  }
};

// Runs `args` (args[0] looked up in PATH) to completion with `env` added to
// the environment; stdout and stderr go through files in `dir`.
ProcessResult run_process(std::vector<std::string> args, const std::filesystem::path& dir,
                          std::vector<std::string> env = {}) {
  const auto out_path = dir / "out.txt", err_path = dir / "err.txt";
  std::vector<std::string> envs = environment_with(env);
  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(envs);
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  ProcessResult r;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

class CtlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kCtlPath))
        << kCtlPath << " is missing: build the kvtierctl target too";
  }
  ProcessResult ctl(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), kCtlPath.string());
    return run_process(std::move(args), scratch_.path(), std::move(env));
  }
  test_util::TempDir scratch_;
};

bool one_line(const std::string& text) {
  return !text.empty() && text.find('\n') == text.size() - 1;
}

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

TEST_F(CtlTest, PythonClientStreamsTheSameTokensAsTheEngine) {
  test_util::TempDir dir;
  if (run_process({"python3", "--version"}, dir.path()).exit_code != 0) {
    GTEST_SKIP() << "python3 is not installed; the Python client example is not exercised";
  }
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const Generation want = reference("A fool", 40, 0.9f, 4);
  auto py = run_process(
      {"python3", kPythonClient.string(), "--socket", d.socket_path(), "generate", "--prompt",
       "A fool", "--max-tokens", "40", "--temperature", "0.9", "--seed", "4", "--stream", "--json"},
      dir.path());
  ASSERT_EQ(py.exit_code, 0) << py.err;
  const auto lines = py.out_lines();
  ASSERT_GE(lines.size(), 2u) << py.out;
  // Streamed pieces, then the result.
  std::vector<int> streamed;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    const json piece = json::parse(lines[i]);
    for (int t : piece["tokens"]) streamed.push_back(t);
  }
  const json result = json::parse(lines.back());
  EXPECT_EQ(result["tokens"].get<std::vector<int>>(), want.tokens);
  EXPECT_EQ(streamed, want.tokens);
  EXPECT_EQ(result["text"], want.text);

  auto text = run_process(
      {"python3", kPythonClient.string(), "--socket", d.socket_path(), "generate", "--prompt",
       "A fool", "--max-tokens", "40", "--temperature", "0.9", "--seed", "4", "--stream"},
      dir.path());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "A fool" + want.text + "\n");

  auto stats = run_process({"python3", kPythonClient.string(), "stats"}, dir.path(),
                           {"KVTIER_SOCKET=" + d.socket_path()});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(json::parse(stats.out)["requests_completed"], 2);

  auto unreachable = run_process(
      {"python3", kPythonClient.string(), "--socket", (dir.path() / "none.sock").string(), "stats"},
      dir.path());
  EXPECT_EQ(unreachable.exit_code, 3);
  shutdown(d);
}

}  // namespace
}  // namespace kvtier

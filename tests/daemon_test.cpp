// Black-box tests of kvtierd: each test starts the real binary on a socket in
// a fresh temporary directory, talks newline-delimited JSON-RPC to it over a
// plain Unix socket, and stops it. Every wait is bounded: a daemon that hangs
// fails the test instead of hanging the suite, and the fixture kills and
// reaps whatever is still running.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#if defined(KVTIER_HAVE_CUDA)
#include "kernels/cuda/cuda_device.h"
#endif
#include "daemon/cli.h"
#include "engine/build_info.h"
#include "engine/scheduling/request.h"
#include "tiers/host_memory.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;
using namespace std::chrono_literals;

TEST(DaemonTest, HealthAnswersAndShutdownExitsZero) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  auto r = c->call(request(1, "health"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["id"], 1);
  EXPECT_EQ((*r)["result"]["status"], "ok");
  EXPECT_EQ((*r)["result"]["model"]["vocab_size"], 96);
  // --device auto: the GPU when this build has CUDA and a device is usable.
  const std::string device = (*r)["result"]["device"];
#if defined(KVTIER_HAVE_CUDA)
  if (kernels::cuda_device_missing().empty())
    EXPECT_TRUE(device.starts_with("cuda (")) << device;
  else
    EXPECT_EQ(device, "cpu");
#else
  EXPECT_EQ(device, "cpu");
#endif
  shutdown(d);
}

TEST(DaemonTest, GreedyAndSeededGenerateMatchTheEngineInProcess) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  struct Case {
    std::string prompt;
    float temperature;
    std::uint64_t seed;
  };
  for (const Case& k : {Case{"The meaning of life is", 0.0f, 0}, Case{"A fool", 0.9f, 42}}) {
    const Generation want = reference(k.prompt, 40, k.temperature, k.seed);
    auto r = c->call(request(2, "generate", generate_params(k.prompt, 40, k.temperature, k.seed)));
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(r->contains("result")) << r->dump();
    const json& res = (*r)["result"];
    EXPECT_EQ(res["tokens"].get<std::vector<int>>(), want.tokens) << k.prompt;
    EXPECT_EQ(res["text"], want.text);
    EXPECT_EQ(res["finish_reason"], "length");
    EXPECT_EQ(res["completion_tokens"], 40);
    EXPECT_EQ(res["prompt_tokens"], static_cast<int>(k.prompt.size()));
    EXPECT_GE(res["timings"]["total_ms"].get<double>(), res["timings"]["ttft_ms"].get<double>());
  }
  shutdown(d);
}

// Without a seed, two sampled runs differ in their seeds (not all the same
// text, as seed 0 for all once made them), and the seed the result reports
// replays the run exactly, in the daemon and in the engine.
TEST(DaemonTest, ARequestWithoutASeedGetsARandomOneThatReplaysIt) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  const json unseeded = {{"prompt", "A fool"}, {"max_tokens", 24}};
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < 2; ++i) {
    auto r = c->call(request(10 + i, "generate", unseeded));
    ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
    const json& res = (*r)["result"];
    ASSERT_TRUE(res["seed"].is_number_unsigned()) << res.dump();
    const std::uint64_t seed = res["seed"].get<std::uint64_t>();
    EXPECT_LT(seed, std::uint64_t{1} << 53);  // exact in every JSON client
    seeds.push_back(seed);
    // The protocol's defaults: temperature 1, 64 tokens unless given.
    const Generation want = reference("A fool", 24, 1.0f, seed);
    EXPECT_EQ(res["tokens"].get<std::vector<int>>(), want.tokens) << "seed " << seed;
    json replay = unseeded;
    replay["seed"] = seed;
    auto again = c->call(request(20 + i, "generate", replay));
    ASSERT_TRUE(again && again->contains("result"));
    EXPECT_EQ((*again)["result"]["tokens"], res["tokens"]);
    EXPECT_EQ((*again)["result"]["seed"], seed);
  }
  EXPECT_NE(seeds[0], seeds[1]);
  shutdown(d);
}

// What an operator reads: the version at start-up and in health and stats,
// one info line per finished request and per disconnect, each line stamped
// with the time when not under journald.
TEST(DaemonTest, TheLogAndHealthSayWhatAnOperatorNeeds) {
  Daemon d({"--log-level", "info"});
  ASSERT_TRUE(d.wait_ready());
  EXPECT_TRUE(test_util::contains(d.log(), version_text("kvtierd") + " starting")) << d.log();
  {
    auto c = d.connect();
    auto health = c->call(request(1, "health"));
    ASSERT_TRUE(health && health->contains("result"));
    EXPECT_EQ((*health)["result"]["version"], std::string(version()));
    EXPECT_EQ((*health)["result"]["git_revision"], std::string(git_revision()));
    EXPECT_EQ((*health)["result"]["model"]["name"], "fortunes-char");
    auto stats = c->call(request(2, "stats"));
    ASSERT_TRUE(stats && stats->contains("result"));
    EXPECT_EQ((*stats)["result"]["version"], std::string(version()));
    auto r = c->call(request(3, "generate", generate_params("The meaning of", 7, 0.0f, 0)));
    ASSERT_TRUE(r && r->contains("result"));
    const std::string id = std::to_string((*r)["result"]["id"].get<long>());
    EXPECT_TRUE(d.wait_log("request " + id + " length: uid " + std::to_string(::geteuid()) +
                           ", 14 prompt tokens (cached: none), 7 generated, TTFT "))
        << d.log();
  }
  EXPECT_TRUE(d.wait_log("client disconnected: ")) << d.log();
  shutdown(d);
  // Every line of kvtierd's starts "YYYY-MM-DDTHH:MM:SS.mmm+ZZZZ kvtierd: ".
  std::istringstream lines(d.log());
  int stamped = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("kvtierd: ") == std::string::npos) continue;
    const bool ok = line.size() > 29 && line[4] == '-' && line[10] == 'T' && line[19] == '.' &&
                    line.find(" kvtierd: ") == 28;
    EXPECT_TRUE(ok) << "not stamped: " << line;
    stamped += ok;
  }
  EXPECT_GE(stamped, 4);
}

TEST(DaemonTest, StreamedNotificationsConcatenateToTheFinalText) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  std::vector<json> notes;
  auto r = c->call(request(3, "generate", generate_params("Love is", 30, 0.8f, 7, true)), &notes);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->contains("result")) << r->dump();
  std::string text;
  std::vector<int> tokens;
  for (const json& n : notes) {
    EXPECT_EQ(n["method"], "generate.token");
    EXPECT_EQ(n["params"]["id"], (*r)["result"]["id"]);
    EXPECT_EQ(n["params"]["rpc_id"], 3);  // the generate's own JSON-RPC id
    text += n["params"]["text"].get<std::string>();
    for (int t : n["params"]["tokens"]) tokens.push_back(t);
  }
  EXPECT_FALSE(notes.empty());
  EXPECT_EQ(text, (*r)["result"]["text"]);
  EXPECT_EQ(tokens, (*r)["result"]["tokens"].get<std::vector<int>>());
  shutdown(d);
}

TEST(DaemonTest, ConcurrentClientsEachGetTheirResultAlone) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::vector<std::string> prompts = {"The cat", "Never", "A wise man", "Today"};
  std::vector<std::vector<int>> alone;
  {
    auto c = d.connect();
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      auto r = c->call(request(1, "generate", generate_params(prompts[i], 30, 0.8f, i)));
      ASSERT_TRUE(r && r->contains("result"));
      alone.push_back((*r)["result"]["tokens"].get<std::vector<int>>());
    }
  }
  std::vector<std::vector<int>> together(prompts.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      Client c(d.socket_path());
      auto r = c.call(request(static_cast<int>(i), "generate",
                              generate_params(prompts[i], 30, 0.8f, i, i % 2)));
      if (r && r->contains("result"))
        together[i] = (*r)["result"]["tokens"].get<std::vector<int>>();
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], alone[i]) << prompts[i];
  shutdown(d);
}

TEST(DaemonTest, BadInputGetsTheRightErrorAndTheConnectionStaysUsable) {
  Daemon d({"--max-line-bytes", "1024"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  auto raw = [&](const std::string& line) {
    c->send_raw(line + "\n");
    return c->read();
  };
  EXPECT_EQ(error_code(raw("{not json")), -32700);
  EXPECT_EQ(error_code(raw("[1,2]")), -32600);
  EXPECT_EQ(error_code(raw(R"({"jsonrpc":"1.0","id":1,"method":"health"})")), -32600);
  EXPECT_EQ(error_code(raw(R"({"jsonrpc":"2.0","id":1,"method":7})")), -32600);
  EXPECT_EQ(error_code(c->call(request(1, "no.such.method"))), -32601);
  // Wrong types.
  EXPECT_EQ(error_code(c->call(request(2, "generate", {{"prompt", 5}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(3, "generate", {{"prompt", "a"}, {"max_tokens", "ten"}}))),
            -32602);
  EXPECT_EQ(error_code(c->call(request(4, "generate", {{"tokens", {1, "x"}}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(5, "generate", {{"prompt", "a"}, {"stream", 1}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(6, "generate", json::array()))), -32602);
  EXPECT_EQ(error_code(c->call(request(7, "generate", {{"prompt", "a"}, {"bogus", 1}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(8, "cancel", {{"id", "x"}}))), -32602);
  // Out-of-range values: the engine's validation message comes back.
  auto top_p = c->call(request(9, "generate", {{"prompt", "a"}, {"top_p", 5}}));
  EXPECT_EQ(error_code(top_p), -32602);
  EXPECT_TRUE(test_util::contains((*top_p)["error"]["message"].get<std::string>(), "top_p"));
  EXPECT_EQ(error_code(c->call(request(10, "generate", {{"prompt", "a"}, {"max_tokens", 0}}))),
            -32602);
  EXPECT_EQ(error_code(c->call(request(11, "generate", {{"tokens", {1, 1000}}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(12, "generate", {{"prompt", ""}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(13, "generate", {{"prompt", "a"}, {"temperature", -1}}))),
            -32602);
  EXPECT_EQ(error_code(c->call(request(14, "generate", {{"prompt", "a"}, {"max_tokens", 1e12}}))),
            -32602);
  EXPECT_EQ(error_code(c->call(request(15, "cancel", {{"id", 12345}}))), -32602);
  // A line over --max-line-bytes: one error, then the next line is served.
  EXPECT_EQ(error_code(raw(std::string(5000, 'x'))), -32001);
  auto ok = c->call(request(16, "generate", generate_params("Hi", 5, 0.0f, 0)));
  ASSERT_TRUE(ok.has_value());
  EXPECT_TRUE(ok->contains("result")) << ok->dump();
  EXPECT_EQ((*c->call(request(17, "health")))["result"]["status"], "ok");
  shutdown(d);
}

// One line once took every client down: params nested 100,000 deep (600 KB,
// under the 1 MiB line limit) overflowed the event loop's stack when they
// were copied. Now the line is refused as it is parsed, and the daemon
// serves on; so is `help` with parameters, which the docs say it has none.
TEST(DaemonTest, ADeeplyNestedLineIsRefusedAndTheDaemonServesOn) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  for (const char* method : {"generate", "health"}) {
    std::string nested;
    for (int i = 0; i < 100000; ++i) nested += R"({"a":)";
    nested += "1" + std::string(100000, '}');
    const std::string deep = R"({"jsonrpc":"2.0","id":1,"method":")" + std::string(method) +
                             R"(","params":)" + nested + "}";
    ASSERT_LT(deep.size(), std::size_t{1} << 20) << "under the default max_line_bytes";
    ASSERT_TRUE(c->send_raw(deep + "\n"));
    auto r = c->read();
    EXPECT_EQ(error_code(r), -32600) << method;
  }
  EXPECT_EQ(error_code(c->call(request(2, "help", {{"verbose", true}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(3, "health", json::array()))), -32602);
  auto health = c->call(request(4, "health"));
  ASSERT_TRUE(health && health->contains("result"));
  shutdown(d);
}

TEST(DaemonTest, RequestsPastMaxPendingAreRefused) {
  Daemon d({"--max-pending", "1"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  // Both lines in one write: the daemon reads them together, so the first is
  // still pending when the second is parsed.
  c->send_raw(request(1, "generate", generate_params("Long", 200, 0.8f, 1)).dump() + "\n" +
              request(2, "generate", generate_params("Short", 5, 0.8f, 1)).dump() + "\n");
  std::optional<json> first, second;
  for (int i = 0; i < 2; ++i) {
    auto msg = c->read();
    ASSERT_TRUE(msg.has_value());
    ((*msg)["id"] == 1 ? first : second) = msg;
  }
  EXPECT_EQ(error_code(second), -32000);
  EXPECT_TRUE(first && first->contains("result"));
  shutdown(d);
}

TEST(DaemonTest, ClientThatDisconnectsMidStreamIsCancelledAndOthersAreUndisturbed) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  {
    auto quitter = d.connect();
    ASSERT_TRUE(
        quitter->send(request(1, "generate", generate_params("Goodbye", 200, 0.8f, 3, true))));
    auto note = quitter->read();
    ASSERT_TRUE(note.has_value());
    EXPECT_EQ((*note)["method"], "generate.token");
  }  // closes the connection mid-stream
  const Generation want = reference("Hello", 30, 0.0f, 0);
  auto other = d.connect();
  auto r = other->call(request(2, "generate", generate_params("Hello", 30, 0.0f, 0)));
  ASSERT_TRUE(r && r->contains("result"));
  EXPECT_EQ((*r)["result"]["tokens"].get<std::vector<int>>(), want.tokens);

  // The quitter's request was cancelled and its KV blocks given back.
  const json idle = wait_idle(d);
  EXPECT_EQ(idle["requests_cancelled"], 1) << idle.dump();
  shutdown(d);
}

TEST(DaemonTest, ClientThatStopsReadingIsDroppedAndItsRequestsCancelled) {
  Daemon d({"--max-output-bytes", "4096"});
  ASSERT_TRUE(d.wait_ready());
  auto slow = d.connect();
  // Far more notifications than the socket buffers plus 4 KiB can hold.
  std::string lines;
  for (int i = 0; i < 40; ++i) {
    lines += request(i, "generate", generate_params("Flood", 200, 0.8f, i, true)).dump() + "\n";
  }
  ASSERT_TRUE(slow->send_raw(lines));

  // Others are served meanwhile, and the slow client's requests end.
  auto other = d.connect();
  json stats;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto s = other->call(request(1, "stats"));
    ASSERT_TRUE(s && s->contains("result"));
    stats = (*s)["result"];
    if (stats["pending"] == 0 && stats["requests_submitted"] > 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(stats["pending"], 0) << stats.dump();
  EXPECT_GT(stats["requests_cancelled"].get<int>(), 0) << stats.dump();
  EXPECT_EQ(stats["blocks_used"], 0);
  // The slow client finds its connection closed once it drains what was sent
  // (read() gives nullopt at EOF; the loop is bounded by its timeout too).
  while (slow->read(kTimeout).has_value()) {
  }
  shutdown(d);
}

TEST(DaemonTest, CancelEndsARunningRequest) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  ASSERT_TRUE(c->send(request(1, "generate", generate_params("Wait", 200, 0.8f, 3, true))));
  auto note = c->read();
  ASSERT_TRUE(note && note->contains("params"));
  const json id = (*note)["params"]["id"];
  ASSERT_TRUE(c->send(request(2, "cancel", {{"id", id}})));
  std::optional<json> generate_response, cancel_response;
  while (!generate_response || !cancel_response) {
    auto msg = c->read();
    ASSERT_TRUE(msg.has_value());
    if (!msg->contains("id")) continue;
    ((*msg)["id"] == 1 ? generate_response : cancel_response) = msg;
  }
  EXPECT_TRUE(cancel_response->contains("result")) << cancel_response->dump();
  EXPECT_EQ((*generate_response)["result"]["finish_reason"], "cancelled");
  EXPECT_LT((*generate_response)["result"]["completion_tokens"].get<int>(), 200);
  shutdown(d);
}

// Starts a streamed generate on `c` and returns its request id, from its
// first token.
json start_streamed(Client& c, int rpc_id, const std::string& prompt) {
  EXPECT_TRUE(c.send(request(rpc_id, "generate", generate_params(prompt, 200, 0.8f, 3, true))));
  auto note = c.read();
  EXPECT_TRUE(note && note->contains("params")) << (note ? note->dump() : "no answer");
  return note ? (*note)["params"]["id"] : json();
}

// Reads messages until the response with JSON-RPC id `id`, collecting the
// notifications on the way; nullopt on timeout or EOF.
std::optional<json> read_response(Client& c, const json& id, std::vector<json>* notes = nullptr) {
  while (auto msg = c.read()) {
    if (!msg->contains("id")) {
      if (notes) notes->push_back(*msg);
      continue;
    }
    if ((*msg)["id"] == id) return msg;
  }
  return std::nullopt;
}

// Request ids are sequential, so anyone could name another's: a cancel is
// honoured from the request's own connection, its uid, or a privileged
// caller, and refused with -32003 for anyone else.
TEST(DaemonTest, ARequestIsCancelledOnlyByItsConnectionItsUidOrAPrivilegedCaller) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  Daemon d({"--log-level", "info"});
  ASSERT_TRUE(d.wait_ready());
  std::string why;
  // gid 0 keeps the 0660 socket open to the other uid.
  auto nobody = connect_as(d.socket_path(), 65534, 0, why);
  if (!nobody) {
    shutdown(d);
    GTEST_SKIP() << why;
  }
  auto root = d.connect();

  // Another uid, not privileged: refused, and root's request runs on.
  const json root_id = start_streamed(*root, 1, "Root's");
  auto refused = nobody->call(request(2, "cancel", {{"id", root_id}}));
  EXPECT_EQ(error_code(refused), -32003) << (refused ? refused->dump() : "no answer");
  auto root_done = read_response(*root, 1);
  ASSERT_TRUE(root_done && root_done->contains("result"));
  EXPECT_NE((*root_done)["result"]["finish_reason"], "cancelled");
  EXPECT_TRUE(d.wait_log("refused 'cancel' of request")) << d.log();

  // The same uid on another connection may.
  auto nobody_again = connect_as(d.socket_path(), 65534, 0, why);
  ASSERT_TRUE(nobody_again) << why;
  const json own_id = start_streamed(*nobody, 3, "Mine");
  auto by_same_uid = nobody_again->call(request(4, "cancel", {{"id", own_id}}));
  ASSERT_TRUE(by_same_uid && by_same_uid->contains("result")) << by_same_uid->dump();
  EXPECT_EQ((*read_response(*nobody, 3))["result"]["finish_reason"], "cancelled");

  // So may a privileged caller (root, the daemon's uid).
  const json other_id = start_streamed(*nobody, 5, "Again");
  auto by_root = root->call(request(6, "cancel", {{"id", other_id}}));
  ASSERT_TRUE(by_root && by_root->contains("result")) << by_root->dump();
  EXPECT_EQ((*read_response(*nobody, 5))["result"]["finish_reason"], "cancelled");
  shutdown(d);
}

TEST(DaemonTest, SigtermWithDrainTimeoutZeroCancelsARequestInFlightAndExitsZero) {
  Daemon d({"--drain-timeout", "0"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  ASSERT_TRUE(c->send(request(1, "generate", generate_params("Stop", 200, 0.8f, 5, true))));
  ASSERT_TRUE(c->read().has_value());  // it is running
  ASSERT_EQ(::kill(d.pid(), SIGTERM), 0);
  // The client gets its final response (cancelled) before the socket closes.
  std::optional<json> response;
  while (auto msg = c->read()) {
    if (msg->contains("id")) {
      response = msg;
      break;
    }
  }
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ((*response)["result"]["finish_reason"], "cancelled");
  EXPECT_TRUE(exited_zero(d.wait_exit()));
  EXPECT_FALSE(std::filesystem::exists(d.socket_path()));
}

TEST(DaemonTest, StaleSocketFileIsReplaced) {
  // A socket file bound and never listened on, as a daemon killed with
  // SIGKILL leaves behind: nobody answers on it.
  test_util::TempDir dir;
  const std::string path = (dir.path() / "kvtierd.sock").string();
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);  // bound, never listened on, now closed: a stale file
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  auto daemon = util::spawn_child({KVTIER_DAEMON_PATH, "--socket", path, "--model",
                                   kModelDir.string(), "--log-level", "warning"});
  ASSERT_TRUE(daemon) << daemon.error();
  bool ready = false;
  for (auto deadline = std::chrono::steady_clock::now() + kTimeout;
       !ready && std::chrono::steady_clock::now() < deadline;) {
    Client c(path);
    ready = c.valid() && c.call(request(1, "health")).has_value();
    if (!ready) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(ready);
  const util::ChildExit end = daemon->stop(kTimeout);
  if (end.killed) FAIL() << "kvtierd did not exit on SIGTERM";
  EXPECT_TRUE(WIFEXITED(end.status) && WEXITSTATUS(end.status) == 0);
}

// A socket path that cannot be bound is refused before the model loads: with
// a model folder that cannot load, the daemon's only complaint is the path.
TEST(DaemonTest, AnUnusableSocketPathIsRefusedBeforeTheModelLoads) {
  test_util::TempDir dir;
  const std::string no_model = dir.path().string();  // a folder with no config.json
  const std::string too_long = (dir.path() / std::string(120, 's')).string();
  auto long_path = run_kvtierd({"--socket", too_long, "--model", no_model});
  EXPECT_TRUE(exited_nonzero(long_path));
  EXPECT_TRUE(test_util::contains(long_path.err, "has at most 107")) << long_path.err;
  EXPECT_FALSE(test_util::contains(long_path.err, "cannot load model")) << long_path.err;
  // With a model that loads, the same path once aborted after the load.
  auto with_model = run_kvtierd({"--socket", too_long, "--model", kModelDir.string()});
  ASSERT_TRUE(with_model.status.has_value());
  EXPECT_TRUE(WIFEXITED(*with_model.status)) << "killed by signal " << WTERMSIG(*with_model.status);
  EXPECT_TRUE(exited_nonzero(with_model));

  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto second = run_kvtierd({"--socket", d.socket_path(), "--model", no_model});
  EXPECT_TRUE(exited_nonzero(second));
  EXPECT_TRUE(test_util::contains(second.err, "another daemon is listening on " + d.socket_path()))
      << second.err;
  EXPECT_FALSE(test_util::contains(second.err, "cannot load model")) << second.err;
  auto c = d.connect();  // the first one serves on, undisturbed
  ASSERT_TRUE(c->valid());
  EXPECT_TRUE(c->call(request(1, "health")).has_value());
  shutdown(d);
}

TEST(DaemonTest, SocketIsMode0660AndTheDaemonsOwnUidMayShutItDown) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  struct stat st {};
  ASSERT_EQ(::stat(d.socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  // The test runs as the daemon's uid: the privileged call is allowed (the
  // refusal is tested through privileged_call_allowed in access_test.cpp).
  shutdown(d);
}

TEST(DaemonTest, SocketGroupGivesTheSocketToThatGroup) {
  const group* g = ::getgrgid(::getegid());
  ASSERT_NE(g, nullptr);
  Daemon d({"--socket-group", g->gr_name});
  ASSERT_TRUE(d.wait_ready());
  struct stat st {};
  ASSERT_EQ(::stat(d.socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, ::getegid());
  shutdown(d);
}

// Sizes past the machine's memory once ended in std::bad_alloc and exit 134.
TEST(DaemonTest, PoolsTheMachineCannotHoldAreRefusedWithWhatItHas) {
  const auto memory = tiers::host_memory();
  ASSERT_TRUE(memory.has_value());
  test_util::TempDir dir;
  // The CPU's pools: with a GPU, --device auto would lay L1 in its memory
  // and refuse a size it cannot hold with the GPU's out-of-memory instead.
  const std::vector<std::string> base = {"--socket", (dir.path() / "s.sock").string(),
                                         "--model",  kModelDir.string(),
                                         "--device", "cpu"};
  if (memory->available >= (std::uint64_t{1} << 40))
    GTEST_SKIP() << "this machine has 1 TiB free, the largest size the flags take";
  std::vector<RefusedFlags> cases = {
      {{"--l1-bytes", "1T"}, "of host memory"},
      {{"--l2-bytes", "1T"}, "of host memory"},
  };
  // The bundled model keeps 4 KiB of KV a token: 16 Mi tokens are 64 GiB.
  if (memory->available < (std::uint64_t{64} << 30))
    cases.push_back({{"--max-kv-tokens", "16777216"}, "lower max_kv_tokens, l1_bytes or l2_bytes"});
  expect_refused(base, cases);
}

TEST(DaemonTest, UnknownSocketGroupIsAClearError) {
  test_util::TempDir dir;
  auto r = run_kvtierd({"--socket", (dir.path() / "s.sock").string(), "--model", kModelDir.string(),
                        "--socket-group", "kvtier-no-such-group"});
  EXPECT_TRUE(exited_nonzero(r)) << r.err;
  EXPECT_TRUE(test_util::contains(r.err, "no such group 'kvtier-no-such-group'"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "s.sock"));
}

TEST(DaemonTest, ConfigFileSetsServerFlagsAndTheCommandLineWins) {
  test_util::TempDir dir;
  const auto config =
      dir.write("kvtierd.toml", "# a comment\nmax-kv-tokens = 1024\nmax-batch-size = 3\n");
  Daemon d({"--config", config.string(), "--max-batch-size", "5"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  auto r = c->call(request(1, "health"));
  ASSERT_TRUE(r && r->contains("result"));
  EXPECT_EQ((*r)["result"]["config"]["max_kv_tokens"], 1024);
  EXPECT_EQ((*r)["result"]["config"]["max_batch_size"], 5);
  shutdown(d);
}

// --device takes auto, cpu or cuda, and cuda only where the kernels can
// run: otherwise kvtierd exits at start-up with the reason instead of
// serving from a device that cannot compute.
TEST(DaemonTest, AnUnknownOrUnusableDeviceIsRefusedWithTheReason) {
  test_util::TempDir dir;
  const std::vector<std::string> base = {"--socket", (dir.path() / "s.sock").string(), "--model",
                                         kModelDir.string()};
  expect_refused(base, {{{"--device", "gpu"}, "--device"}});
#if defined(KVTIER_HAVE_CUDA)
  if (kernels::cuda_device_missing().empty()) GTEST_SKIP() << "a usable CUDA device is present";
  // Without NVIDIA's driver, the reason says so, not the CUDA runtime's
  // "driver version is insufficient" for a driver that is not there.
  if (!std::filesystem::exists("/proc/driver/nvidia/version"))
    expect_refused(base, {{{"--device", "cuda"}, "device cuda: no NVIDIA GPU or driver"}});
#endif
  expect_refused(base, {{{"--device", "cuda"}, "device cuda: "}});
}

bool exited_with(const RunResult& r, int code) {
  return r.status && WIFEXITED(*r.status) && WEXITSTATUS(*r.status) == code;
}

// Every way a configuration can be wrong ends in one exit code, 78
// (EX_CONFIG, which the systemd unit does not restart on), and a message
// naming the file, the line and the key, in the form of every start-up
// refusal ("kvtierd: error: ..."); a command line kvtierd cannot read is a
// usage error, 2, with the --help to read.
TEST(DaemonTest, BadConfigurationExits78WithTheFileLineAndKey) {
  test_util::TempDir dir;
  const std::string path = (dir.path() / "kvtierd.toml").string();
  auto run = [&](const std::string& text) {
    dir.write("kvtierd.toml", text);
    return run_kvtierd({"--config", path, "--socket", (dir.path() / "s.sock").string(), "--model",
                        kModelDir.string()});
  };
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"# a comment\n\nmax-kv-tokenz = 1024\n", path + ":3: max-kv-tokenz: no such setting"},
      {"max-kv-tokens = \"lots\"\n", path + ":1: max-kv-tokens: must be an integer"},
      {"token-budget = 64\nmax-pending = 0\n", path + ":2: max-pending: must be an integer in"},
      {"max-batch-size = 4\nmax_batch_size = 4\n",
       path + ":2: max_batch_size: given already, at " + path + ":1: max-batch-size"},
      {"[tiers]\nl2-bytes = 0\n", path + ":1: tiers: settings are top-level keys"},
      {"max-batch-size = = 4\n", path + ":1: not TOML"},
      {"l2-bytes = \"12 parsecs\"\n", path + ":1: l2-bytes: "},
  };
  const auto one_form = [](const RunResult& r) {
    return test_util::contains(r.err, "kvtierd: error: ") &&
           !test_util::contains(r.err, "Run with --help");
  };
  for (const auto& [text, says] : refused) {
    auto r = run(text);
    EXPECT_TRUE(exited_with(r, 78)) << text << r.err;
    EXPECT_TRUE(test_util::contains(r.err, says)) << text << "\nsaid: " << r.err;
    EXPECT_TRUE(one_form(r)) << r.err;
  }
  auto missing = run_kvtierd({"--config", (dir.path() / "none.toml").string()});
  EXPECT_TRUE(exited_with(missing, 78)) << missing.err;
  EXPECT_TRUE(test_util::contains(missing.err, "none.toml"));
  EXPECT_TRUE(one_form(missing)) << missing.err;
  auto no_model = run_kvtierd({"--model", (dir.path() / "no-model").string()});
  EXPECT_TRUE(exited_with(no_model, 78)) << no_model.err;
  EXPECT_TRUE(test_util::contains(no_model.err, "--model")) << no_model.err;
  EXPECT_TRUE(one_form(no_model)) << no_model.err;
  auto bad_flag = run_kvtierd({"--max-batch-size", "0"});
  EXPECT_TRUE(exited_with(bad_flag, 78)) << bad_flag.err;
  EXPECT_TRUE(one_form(bad_flag)) << bad_flag.err;
  auto unknown_flag = run_kvtierd({"--max-batch-sise", "4"});
  EXPECT_TRUE(exited_with(unknown_flag, 2)) << unknown_flag.err;
  EXPECT_TRUE(test_util::contains(unknown_flag.err, "Run with --help")) << unknown_flag.err;
}

// Names as config.get prints them work in the file beside the flags' names,
// and the command line wins over both.
TEST(DaemonTest, TheConfigFileTakesUnderscoreNamesAndTheCommandLineWins) {
  test_util::TempDir dir;
  const auto file = dir.write("kvtierd.toml",
                              "max_batch_size = 3\ntoken-budget = 48\nl2_bytes = \"1M\"\n"
                              "drain_timeout = 2.5\n");
  daemon::DaemonConfig defaults;
  defaults.model_dir = kModelDir.string();
  auto cl =
      daemon::cli_parse({"kvtierd", "--config", file.string(), "--token-budget", "32"}, defaults);
  ASSERT_TRUE(cl) << cl.error().err;
  EXPECT_EQ(cl->config.scheduler.max_batch_size, 3);
  EXPECT_EQ(cl->config.scheduler.token_budget, 32);
  EXPECT_EQ(cl->config.scheduler.cache.l2_bytes, std::size_t{1} << 20);
  EXPECT_EQ(cl->config.drain_timeout, 2.5);
}

TEST(DaemonTest, VersionNamesTheReleaseAndTheGitRevision) {
  FILE* p = ::popen(KVTIER_DAEMON_PATH " --version", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char chunk[256];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, p)) > 0;) out.append(chunk, n);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_EQ(out, version_text("kvtierd") + "\n");
  EXPECT_TRUE(out.starts_with("kvtierd " + std::string(version()) + " (git ")) << out;
  EXPECT_NE(git_revision(), "") << out;
}

// A datagram socket standing in for systemd's notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::filesystem::path& path) : path_(path.string()) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() { ::close(fd_); }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }

  // Reads messages until one contains `needle`; false on timeout.
  bool wait_for(const std::string& needle, std::chrono::milliseconds timeout = kTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char msg[4096];
      const ssize_t n = ::recv(fd_, msg, sizeof(msg), 0);
      if (n <= 0) continue;
      const std::string text(msg, static_cast<std::size_t>(n));
      received_ += text + "\n";
      if (test_util::contains(text, needle)) return true;
    }
  }
  const std::string& received() const { return received_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::string received_;
};

TEST(DaemonTest, SystemdGetsReadyWatchdogPingsAndStopping) {
  test_util::TempDir dir;
  NotifySocket notify(dir.path() / "notify.sock");
  ASSERT_TRUE(notify.bound());
  // A 200 ms watchdog: pings every 100 ms.
  Daemon d({}, {"NOTIFY_SOCKET=" + notify.path(), "WATCHDOG_USEC=200000"});
  ASSERT_TRUE(notify.wait_for("READY=1")) << notify.received();
  EXPECT_TRUE(test_util::contains(notify.received(), "STATUS="));
  // The daemon answers once READY=1 has been sent: no polling needed.
  auto c = d.connect();
  ASSERT_TRUE(c->valid());
  // Pings keep coming from the running event loop.
  EXPECT_TRUE(notify.wait_for("WATCHDOG=1")) << notify.received();
  EXPECT_TRUE(notify.wait_for("WATCHDOG=1")) << notify.received();
  shutdown(d);
  EXPECT_TRUE(notify.wait_for("STOPPING=1", 5s)) << notify.received();
}

TEST(DaemonTest, SocketActivationServesOnTheInheritedSocketAndLeavesItsFile) {
  test_util::TempDir dir;
  const std::string path = (dir.path() / "activated.sock").string();
  const std::string unused = (dir.path() / "unused.sock").string();
  // Bound and listening, as systemd's kvtierd.socket hands it over; not
  // close-on-exec, so the child keeps it across exec.
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 16), 0);

  util::SpawnOptions activated;
  activated.in_child = [listener] {
    // sd_listen_fds(3): the sockets start at fd 3, and LISTEN_PID must be
    // the daemon's own pid, known only here.
    if (listener != 3) ::dup2(listener, 3);
    char listen_pid[32];
    std::snprintf(listen_pid, sizeof(listen_pid), "%d", static_cast<int>(::getpid()));
    ::setenv("LISTEN_PID", listen_pid, 1);
    ::setenv("LISTEN_FDS", "1", 1);
  };
  auto daemon = util::spawn_child({KVTIER_DAEMON_PATH, "--socket", unused, "--model",
                                   kModelDir.string(), "--log-level", "warning"},
                                  activated);
  ::close(listener);  // the daemon holds it now
  ASSERT_TRUE(daemon) << daemon.error();

  // connect() succeeds on the backlog at once; wait for an answer instead.
  bool served = false;
  for (auto deadline = std::chrono::steady_clock::now() + kTimeout;
       !served && std::chrono::steady_clock::now() < deadline;) {
    Client c(path);
    auto r = c.valid() ? c.call(request(1, "health")) : std::nullopt;
    served = r && r->contains("result");
    if (!served) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(served);
  {
    Client c(path);
    EXPECT_TRUE(c.call(request(2, "shutdown")).has_value());
  }
  auto status = daemon->wait(kTimeout);  // killed past that, when `daemon` goes
  ASSERT_TRUE(status.has_value()) << "kvtierd did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  // systemd owns the activated socket's file; --socket was never bound.
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(unused));
}

json stats_of(Client& c) {
  auto s = c.call(request(900, "stats"));
  return s && s->contains("result") ? (*s)["result"] : json();
}

TEST(DaemonTest, NotificationsRunButGetNoResponse) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  auto notification = [](const std::string& method, json params) {
    return json{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
  };
  // Answered with nothing: a method that exists, one that does not, bad
  // params, and a generate (which runs).
  ASSERT_TRUE(c->send(notification("health", json::object())));
  ASSERT_TRUE(c->send(notification("no.such.method", json::object())));
  ASSERT_TRUE(c->send(notification("generate", {{"prompt", 5}})));
  ASSERT_TRUE(c->send(notification("generate", generate_params("Quiet", 5, 0.0f, 0))));
  // Requests are handled in order, so the first line back answers this one.
  ASSERT_TRUE(c->send(request(7, "health")));
  auto r = c->read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["id"], 7) << r->dump();
  EXPECT_EQ((*r)["result"]["status"], "ok");
  // The generate notification did run, and its result went nowhere.
  json stats;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    stats = stats_of(*c);
    if (stats.value("requests_completed", 0) == 1) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(stats["requests_completed"], 1) << stats.dump();
  EXPECT_EQ(stats["requests_failed"], 0) << stats.dump();  // the bad params never reached it
  // An invalid request cannot be told apart from a request without an id:
  // JSON-RPC answers it, with id null.
  ASSERT_TRUE(c->send_raw(R"({"jsonrpc":"1.0","method":"health"})"
                          "\n"));
  auto invalid = c->read();
  EXPECT_EQ(error_code(invalid), -32600);
  EXPECT_TRUE((*invalid)["id"].is_null());
  shutdown(d);
}

TEST(DaemonTest, SamplesEachMatchTheEngineWithTheirDerivedSeed) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  json params = generate_params("The fool", 25, 0.9f, 11, true);
  params["n"] = 3;
  std::vector<json> notes;
  auto r = c->call(request(1, "generate", params), &notes);
  ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no response");
  const json& res = (*r)["result"];
  ASSERT_EQ(res["samples"].size(), 3u);
  std::size_t total = 0;
  for (int i = 0; i < 3; ++i) {
    const json& sample = res["samples"][i];
    const Generation want = reference("The fool", 25, 0.9f, sample_seed(11, i));
    EXPECT_EQ(sample["tokens"].get<std::vector<int>>(), want.tokens) << "sample " << i;
    EXPECT_EQ(sample["text"], want.text) << "sample " << i;
    EXPECT_EQ(sample["finish_reason"], "length");
    total += sample["tokens"].size();
    // Each sample's stream concatenates to its result.
    std::string text;
    std::vector<int> tokens;
    for (const json& n : notes) {
      if (n["params"]["sample"] != i) continue;
      text += n["params"]["text"].get<std::string>();
      for (int t : n["params"]["tokens"]) tokens.push_back(t);
    }
    EXPECT_EQ(text, sample["text"]) << "sample " << i;
    EXPECT_EQ(tokens, sample["tokens"].get<std::vector<int>>()) << "sample " << i;
  }
  // The top level is sample 0; completion_tokens counts every sample's.
  EXPECT_EQ(res["tokens"], res["samples"][0]["tokens"]);
  EXPECT_EQ(res["completion_tokens"], total);
  // n = 1 has one sample, equal to the top level.
  auto one = c->call(request(2, "generate", generate_params("The fool", 25, 0.9f, 11)));
  ASSERT_TRUE(one && one->contains("result"));
  EXPECT_EQ((*one)["result"]["samples"].size(), 1u);
  EXPECT_EQ((*one)["result"]["tokens"], res["samples"][0]["tokens"]);
  // More samples than the batch holds: the engine's message comes back.
  params["n"] = 100;
  EXPECT_EQ(error_code(c->call(request(3, "generate", params))), -32602);
  shutdown(d);
}

TEST(DaemonTest, ConfigGetListsEverySettingAndConfigSetChangesRuntimeOnesWhole) {
  Daemon d({"--max-batch-size", "4"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  auto get = [&] {
    auto r = c->call(request(1, "config.get"));
    return r && r->contains("result") ? (*r)["result"] : json();
  };
  json config = get();
  for (const char* name : {"log_level", "max_pending", "max_line_bytes", "drain_timeout",
                           "token_budget", "max_batch_size", "policy"}) {
    ASSERT_TRUE(config.contains(name)) << name;
    EXPECT_EQ(config[name]["runtime"], true) << name;
  }
  for (const char* name : {"model", "socket", "page_size", "max_kv_tokens", "max_connections",
                           "max_output_bytes", "allow_any_uid", "threads", "socket_group"}) {
    ASSERT_TRUE(config.contains(name)) << name;
    EXPECT_EQ(config[name]["runtime"], false) << name;
  }
  EXPECT_EQ(config["max_batch_size"]["value"], 4);
  EXPECT_EQ(config["socket"]["value"], d.socket_path());

  auto set = [&](json params) { return c->call(request(2, "config.set", std::move(params))); };
  auto ok = set({{"token_budget", 32}, {"policy", "priority"}, {"max_batch_size", 4}});
  ASSERT_TRUE(ok && ok->contains("result")) << ok->dump();
  // Only what differs is reported.
  EXPECT_EQ((*ok)["result"]["changed"], (json{{"token_budget", 32}, {"policy", "priority"}}));
  config = get();
  EXPECT_EQ(config["token_budget"]["value"], 32);
  EXPECT_EQ(config["policy"]["value"], "priority");
  auto health = c->call(request(3, "health"));
  EXPECT_EQ((*health)["result"]["config"]["token_budget"], 32);

  // Refusals change nothing, not even the valid part of the same call.
  EXPECT_EQ(error_code(set({{"page_size", 32}})), -32602);
  EXPECT_EQ(error_code(set({{"no_such_setting", 1}})), -32602);
  EXPECT_EQ(error_code(set({{"max_pending", "many"}})), -32602);
  EXPECT_EQ(error_code(set({{"drain_timeout", -1}})), -32602);
  EXPECT_EQ(error_code(set(json::object())), -32602);
  auto refused = set({{"max_pending", 5}, {"max_batch_size", 64}});  // over token_budget 32
  EXPECT_EQ(error_code(refused), -32602);
  EXPECT_TRUE(
      test_util::contains((*refused)["error"]["message"].get<std::string>(), "max_batch_size"));
  EXPECT_EQ(get()["max_pending"]["value"], 256);
  EXPECT_EQ(get()["max_batch_size"]["value"], 4);

  // max_line_bytes applies to this very connection from its next read.
  ASSERT_TRUE(set({{"max_line_bytes", 1024}})->contains("result"));
  ASSERT_TRUE(c->send_raw(std::string(3000, 'x') + "\n"));
  EXPECT_EQ(error_code(c->read()), -32001);
  ASSERT_TRUE(set({{"max_line_bytes", 1 << 20}})->contains("result"));
  // max_pending too: with one slot, a second request is refused while the
  // first runs (both lines arrive in one read).
  ASSERT_TRUE(set({{"max_pending", 1}})->contains("result"));
  c->send_raw(request(10, "generate", generate_params("Long", 200, 0.8f, 1)).dump() + "\n" +
              request(11, "generate", generate_params("Short", 5, 0.8f, 1)).dump() + "\n");
  EXPECT_EQ(error_code(read_response(*c, 11)), -32000);
  auto first = read_response(*c, 10);
  ASSERT_TRUE(first && first->contains("result"));
  // Tokens do not depend on the scheduler's tunables.
  EXPECT_EQ((*first)["result"]["tokens"].get<std::vector<int>>(),
            reference("Long", 200, 0.8f, 1).tokens);
  shutdown(d);
}

TEST(DaemonTest, SighupReloadsRuntimeSettingsKeepsTheRestAndSurvivesABadFile) {
  test_util::TempDir dir;
  const auto config = dir.write("kvtierd.toml", "max-batch-size = 4\n");
  Daemon d({"--config", config.string(), "--log-level", "info"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  auto value = [&](const char* name) {
    auto r = c->call(request(1, "config.get"));
    return r && r->contains("result") ? (*r)["result"][name]["value"] : json();
  };
  ASSERT_EQ(value("max_batch_size"), 4);

  dir.write("kvtierd.toml",
            "max-batch-size = 2\ntoken-budget = 32\ndrain-timeout = 2.5\npage-size = 32\n");
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_log("SIGHUP: max_batch_size 4 -> 2")) << d.log();
  EXPECT_TRUE(d.wait_log("SIGHUP: token_budget 0 -> 32")) << d.log();
  EXPECT_TRUE(d.wait_log("page_size changed (16 -> 32) but only takes effect after a restart"))
      << d.log();
  EXPECT_EQ(value("max_batch_size"), 2);
  EXPECT_EQ(value("token_budget"), 32);
  EXPECT_EQ(value("drain_timeout"), 2.5);
  EXPECT_EQ(value("page_size"), 16);
  // The command line still wins over the file.
  EXPECT_EQ(value("log_level"), "info");

  dir.write("kvtierd.toml", "max-batch-size = 3\nno-such-key = 1\n");
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_log("SIGHUP: cannot reload the config file, nothing changed")) << d.log();
  EXPECT_TRUE(test_util::contains(d.log(), "no-such-key"));
  EXPECT_EQ(value("max_batch_size"), 2);
  EXPECT_EQ(value("token_budget"), 32);
  // Still serving.
  auto r = c->call(request(2, "generate", generate_params("After", 10, 0.0f, 0)));
  ASSERT_TRUE(r && r->contains("result"));
  EXPECT_EQ((*r)["result"]["tokens"].get<std::vector<int>>(),
            reference("After", 10, 0.0f, 0).tokens);
  shutdown(d);
}

TEST(DaemonTest, SigtermLetsRequestsInFlightFinishWithinDrainTimeout) {
  Daemon d({"--drain-timeout", "600", "--log-level", "info"});
  ASSERT_TRUE(d.wait_ready());
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(d.connect());
    ASSERT_TRUE(clients.back()->send(
        request(i, "generate", generate_params("Drain " + std::to_string(i), 150, 0.8f, i, true))));
  }
  auto late = d.connect();
  for (auto& c : clients) ASSERT_TRUE(c->read().has_value());  // each is running
  ASSERT_EQ(::kill(d.pid(), SIGTERM), 0);
  ASSERT_TRUE(d.wait_log("draining")) << d.log();
  // A request after the drain began is refused, or finds the daemon gone.
  if (late->send(request(9, "generate", generate_params("Late", 5, 0.0f, 0)))) {
    if (auto r = late->read()) {
      EXPECT_EQ(error_code(r), -32002) << r->dump();
    }
  }
  // Every request in flight ran to its end: the same tokens as alone.
  for (int i = 0; i < 3; ++i) {
    auto r = read_response(*clients[static_cast<std::size_t>(i)], i);
    ASSERT_TRUE(r && r->contains("result")) << "request " << i;
    EXPECT_EQ((*r)["result"]["finish_reason"], "length");
    EXPECT_EQ((*r)["result"]["tokens"].get<std::vector<int>>(),
              reference("Drain " + std::to_string(i), 150, 0.8f, i).tokens);
  }
  EXPECT_TRUE(exited_zero(d.wait_exit()));
  EXPECT_TRUE(test_util::contains(d.log(), "every request finished"));
  EXPECT_FALSE(std::filesystem::exists(d.socket_path()));
}

TEST(DaemonTest, DrainTimeoutCancelsWhatIsStillRunningAndEveryClientGetsAnAnswer) {
  // 40 requests of 250 tokens, one at a time, are 10000 forward passes:
  // far more than fit in the 1 ms drain, so some are cancelled.
  Daemon d({"--drain-timeout", "0.001", "--max-batch-size", "1", "--log-level", "info"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  constexpr int kRequests = 40;
  std::string lines;
  for (int i = 0; i < kRequests; ++i) {
    lines += request(i, "generate", generate_params("A", 250, 0.8f, i)).dump() + "\n";
  }
  ASSERT_TRUE(c->send_raw(lines));
  // All are submitted once the first has a token to show for it.
  json stats;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  {
    auto watcher = d.connect();
    while (std::chrono::steady_clock::now() < deadline) {
      stats = stats_of(*watcher);
      if (stats.value("requests_submitted", 0) == kRequests && stats.value("steps", 0) > 0) break;
      std::this_thread::sleep_for(10ms);
    }
  }
  ASSERT_EQ(stats["requests_submitted"], kRequests) << stats.dump();
  ASSERT_EQ(::kill(d.pid(), SIGTERM), 0);
  int cancelled = 0;
  for (int answered = 0; answered < kRequests; ++answered) {
    auto r = c->read();
    ASSERT_TRUE(r && r->contains("result")) << "only " << answered << " answers";
    const json& res = (*r)["result"];
    const std::string reason = res["finish_reason"];
    ASSERT_TRUE(reason == "length" || reason == "cancelled") << reason;
    // What a cancelled request made before it stopped is what it would have
    // made: a request's first k tokens do not depend on max_tokens.
    const auto got = res["tokens"].get<std::vector<int>>();
    if (reason == "length") {
      EXPECT_EQ(got.size(), 250u);
    }
    if (!got.empty()) {
      EXPECT_EQ(got,
                reference("A", static_cast<int>(got.size()), 0.8f, (*r)["id"].get<int>()).tokens);
    }
    cancelled += reason == "cancelled";
  }
  EXPECT_GT(cancelled, 0);
  EXPECT_TRUE(exited_zero(d.wait_exit()));
  EXPECT_TRUE(test_util::contains(d.log(), "drain_timeout passed"));
}

}  // namespace
}  // namespace kvtier

// Black-box tests of the standard-library Python client
// (examples/python/kvtier_client.py) and of docs/http.md's examples, run as
// they are written. The client against a real kvtierd: its tokens equal the
// engine's in-process result, it sends only the params given, many requests
// share one connection (each token reaching its own by the notification's
// rpc_id), cancel and timeouts work, in its threaded and its asyncio form
// alike. Against a stand-in daemon of the test's own: what it puts on the
// wire, a daemon that never answers, and one too old to send rpc_id. Its socket search
// (the user's socket, then the service's) in a private mount namespace, so
// that /run/kvtier is never made on this machine. The page's curl and httpx
// examples (extracted from docs/http.md, so the page cannot rot) against the
// model scripts/run.sh serves.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSourceDir = KVTIER_SOURCE_DIR;
const fs::path kPythonClient = kSourceDir / "examples/python/kvtier_client.py";
const fs::path kHttpDoc = kSourceDir / "docs/http.md";
const std::string kServiceSocket = "/run/kvtier/kvtierd.sock";

// Debian's interpreter, which the client is written for, when there is one.
std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

// This process's environment without the variables named in `unset`, plus
// `set` ("NAME=VALUE"): a test of the socket search must not inherit the
// caller's KVTIER_SOCKET.
std::vector<std::string> environment(const std::vector<std::string>& set,
                                     const std::vector<std::string>& unset) {
  std::vector<std::string> env;
  for (const std::string& e : environment_with({})) {
    const std::string name = e.substr(0, e.find('='));
    if (std::find(unset.begin(), unset.end(), name) == unset.end()) env.push_back(e);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// The client's command line: python kvtier_client.py args...
ProcessResult client(std::vector<std::string> args, const fs::path& dir,
                     const std::vector<std::string>& set = {},
                     const std::vector<std::string>& unset = {}) {
  args.insert(args.begin(), {python(), kPythonClient.string()});
  return run_process(std::move(args), dir, environment(set, unset));
}

// A Python script using the client's module, run with `args`.
ProcessResult script(const std::string& code, const fs::path& dir,
                     std::vector<std::string> args = {}) {
  const std::string prologue = "import sys\nsys.path.insert(0, " +
                               json(kPythonClient.parent_path().string()).dump() +
                               ")\nimport kvtier_client as kc\n";
  const fs::path file = test_util::write_file(dir / "script.py", prologue + code);
  args.insert(args.begin(), {python(), file.string()});
  return run_process(std::move(args), dir);
}

bool one_line(const std::string& text) {
  return !text.empty() && text.find('\n') == text.size() - 1;
}

std::vector<int> tokens_of(const json& j) { return j.get<std::vector<int>>(); }

// A stand-in for kvtierd on a socket of the test's own. kAnswer: accepts
// one connection and answers its first request with a made-up token and
// result, keeping the request; kNoRpcId: the same, its token without rpc_id
// (as kvtierd sent them before rpc_id); kSilent: listens and never accepts, so a client's
// connect succeeds (the backlog takes it) and nothing is ever answered;
// kFullBacklog: its one-place backlog already full, so a connect waits.
class FakeDaemon {
 public:
  enum class Mode { kAnswer, kNoRpcId, kSilent, kFullBacklog };
  FakeDaemon(const fs::path& path, Mode mode) : path_(path.string()), mode_(mode) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr = address();
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path_;
    EXPECT_EQ(::listen(fd_, mode == Mode::kFullBacklog ? 0 : 8), 0);
    if (mode == Mode::kFullBacklog) {
      // Linux queues backlog + 1 connections before a connect has to wait.
      filler_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      EXPECT_EQ(::connect(filler_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      EXPECT_NE(::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
          << "the backlog is not full: the connect-timeout case would not wait";
      ::close(probe);
    }
    if (mode == Mode::kAnswer || mode == Mode::kNoRpcId) thread_ = std::thread([this] { serve(); });
  }
  ~FakeDaemon() {
    if (thread_.joinable()) thread_.join();
    if (filler_ >= 0) ::close(filler_);
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  // The request it answered; null if none came.
  json request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  sockaddr_un address() const {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    return addr;
  }
  void serve() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(kTimeout.count() * 1000)) != 1) return;
    auto c = Client::adopt(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    auto line = c->read();
    if (!line) return;
    request_ = *line;
    json token = {{"id", 1}, {"sample", 0}, {"tokens", {1}}, {"text", " there"}};
    if (mode_ == Mode::kAnswer) token["rpc_id"] = (*line)["id"];
    c->send({{"jsonrpc", "2.0"}, {"method", "generate.token"}, {"params", token}});
    const json sample = {{"text", " there"}, {"tokens", {1}}, {"finish_reason", "length"}};
    c->send({{"jsonrpc", "2.0"},
             {"id", (*line)["id"]},
             {"result",
              {{"id", 1},
               {"text", " there"},
               {"tokens", {1}},
               {"finish_reason", "length"},
               {"samples", {sample}},
               {"seed", 5},
               {"prompt_tokens", 2},
               {"completion_tokens", 1}}}});
    while (c->read_raw().has_value()) {  // until the client hangs up
    }
  }
  std::string path_;
  Mode mode_;
  int fd_ = -1, filler_ = -1;
  std::thread thread_;
  json request_;
};

class PythonClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run_process({python(), "--version"}, scratch_.path()).exit_code != 0)
      GTEST_SKIP() << "python3 is not installed; the Python client example is not exercised";
  }
  test_util::TempDir scratch_;
};

TEST_F(PythonClientTest, StreamsTheSameTokensAsTheEngineInBothForms) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const Generation want = reference("A fool", 40, 0.9f, 4);
  for (const std::vector<std::string>& form :
       {std::vector<std::string>{}, std::vector<std::string>{"--asyncio"}}) {
    const std::string which = form.empty() ? "threaded" : "asyncio";
    std::vector<std::string> args = {"--socket", d.socket_path()};
    args.insert(args.end(), form.begin(), form.end());
    args.insert(args.end(), {"generate", "--prompt", "A fool", "--max-tokens", "40",
                             "--temperature", "0.9", "--seed", "4", "--stream"});
    auto text = client(args, scratch_.path());
    ASSERT_EQ(text.exit_code, 0) << which << ": " << text.err;
    EXPECT_EQ(text.out, "A fool" + want.text + "\n") << which;

    args.push_back("--json");
    auto py = client(args, scratch_.path());
    ASSERT_EQ(py.exit_code, 0) << which << ": " << py.err;
    // Each notification as kvtierd sent it, then the result.
    std::vector<json> lines;
    std::istringstream in(py.out);
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    ASSERT_GE(lines.size(), 2u) << py.out;
    std::vector<int> streamed;
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
      EXPECT_EQ(lines[i]["method"], "generate.token") << lines[i];
      for (int t : lines[i]["params"]["tokens"]) streamed.push_back(t);
    }
    EXPECT_EQ(streamed, want.tokens) << which;
    EXPECT_EQ(tokens_of(lines.back()["tokens"]), want.tokens) << which;
    EXPECT_EQ(lines.back()["text"], want.text) << which;
  }
  auto stats = client({"stats"}, scratch_.path(), {"KVTIER_SOCKET=" + d.socket_path()});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(json::parse(stats.out)["requests_completed"], 4);
  shutdown(d);
}

TEST_F(PythonClientTest, SendsOnlyTheParamsGiven) {
  // On the wire: the prompt and no sampling field unless given; zero is
  // given too. (stream: the client always streams, to learn each request's
  // id for cancel.)
  for (const std::string form : {"", "--asyncio"}) {
    const fs::path sock = scratch_.path() / "fake.sock";
    std::vector<std::string> head = {"--socket", sock.string()};
    if (!form.empty()) head.push_back(form);
    {
      FakeDaemon fake(sock, FakeDaemon::Mode::kAnswer);
      std::vector<std::string> args = head;
      args.insert(args.end(), {"generate", "--prompt", "Hi"});
      auto r = client(args, scratch_.path());
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, "Hi there\n");
      EXPECT_EQ(fake.request()["params"], json({{"prompt", "Hi"}, {"stream", true}}))
          << "form " << form;
    }
    {
      FakeDaemon fake(sock, FakeDaemon::Mode::kAnswer);
      std::vector<std::string> args = head;
      args.insert(args.end(), {"generate", "--prompt", "Hi", "--temperature", "0", "--seed", "0",
                               "--max-tokens", "7", "--stop", "x"});
      EXPECT_EQ(client(args, scratch_.path()).exit_code, 0);
      EXPECT_EQ(fake.request()["params"], json({{"prompt", "Hi"},
                                                {"temperature", 0.0},
                                                {"seed", 0},
                                                {"max_tokens", 7},
                                                {"stop", {"x"}},
                                                {"stream", true}}))
          << "form " << form;
    }
  }

  // And so kvtierd's defaults apply: a seed of its drawing each run, and
  // temperature 1.
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::vector<std::string> unseeded = {"--socket", d.socket_path(), "generate", "--prompt",
                                             "A fool",   "--max-tokens",  "20",       "--json"};
  auto first = client(unseeded, scratch_.path());
  auto second = client(unseeded, scratch_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(json::parse(first.out)["seed"], json::parse(second.out)["seed"]);

  const Generation at_default = reference("A fool", 40, 1.0f, 4);
  ASSERT_NE(reference("A fool", 40, 0.8f, 4).tokens, at_default.tokens)
      << "temperature 0.8 and 1 give the same tokens here: the check below could not tell";
  auto seeded = client({"--socket", d.socket_path(), "generate", "--prompt", "A fool",
                        "--max-tokens", "40", "--seed", "4", "--json"},
                       scratch_.path());
  ASSERT_EQ(seeded.exit_code, 0) << seeded.err;
  EXPECT_EQ(tokens_of(json::parse(seeded.out)["tokens"]), at_default.tokens);
  shutdown(d);
}

// Two generates on one connection, decoded side by side and read in the
// opposite order to the one they were sent in: each gets its own tokens
// (routed by their notifications' rpc_id) and answer.
constexpr const char* kInFlight = R"py(
import asyncio, json
sock, form = sys.argv[1], sys.argv[2]
A = dict(max_tokens=40, temperature=0.9, seed=4)
B = dict(max_tokens=30, temperature=0.9, seed=5)

def threaded():
    with kc.KvtierClient(sock, timeout=60) as k:
        a = k.generate("A fool", **A)
        b = k.generate("Q: Why", **B)
        out = {}
        for name, r in (("b", b), ("a", a)):
            out[name] = {"rpc_id": r.id, "pieces": list(r), "result": r.result()}
        return out

async def asynchronous():
    async with await kc.AsyncKvtierClient.connect(sock, timeout=60) as k:
        a = await k.generate("A fool", **A)
        b = await k.generate("Q: Why", **B)
        out = {}
        for name, r in (("b", b), ("a", a)):
            out[name] = {"rpc_id": r.id, "pieces": [p async for p in r],
                         "result": await r.result()}
        return out

print(json.dumps(threaded() if form == "threaded" else asyncio.run(asynchronous())))
)py";

TEST_F(PythonClientTest, TwoRequestsInFlightOnOneConnectionGetTheirOwnAnswers) {
  Daemon d({"--log-level", "info"});  // which logs each connection as it accepts it
  ASSERT_TRUE(d.wait_ready());
  const Generation want_a = reference("A fool", 40, 0.9f, 4);
  const Generation want_b = reference("Q: Why", 30, 0.9f, 5);
  const auto connections = [&] {
    const std::string log = d.log();
    int n = 0;
    for (auto at = log.find("client connected: "); at != std::string::npos;
         at = log.find("client connected: ", at + 1))
      ++n;
    return n;
  };
  for (const std::string form : {"threaded", "asyncio"}) {
    const int before = connections();
    auto r = script(kInFlight, scratch_.path(), {d.socket_path(), form});
    ASSERT_EQ(r.exit_code, 0) << form << ": " << r.err;
    EXPECT_EQ(connections() - before, 1) << form << ": " << d.log();
    const json got = json::parse(r.out);
    EXPECT_NE(got["a"]["rpc_id"], got["b"]["rpc_id"]) << form;
    for (const auto& [name, want] : {std::pair{"a", &want_a}, std::pair{"b", &want_b}}) {
      const json& one = got[name];
      EXPECT_EQ(tokens_of(one["result"]["tokens"]), want->tokens) << form << " " << name;
      std::vector<int> streamed;
      for (const json& piece : one["pieces"]) {
        EXPECT_EQ(piece["rpc_id"], one["rpc_id"]) << form << " " << name;
        EXPECT_EQ(piece["id"], one["result"]["id"]) << form << " " << name;
        for (int t : piece["tokens"]) streamed.push_back(t);
      }
      EXPECT_EQ(streamed, want->tokens) << form << " " << name;
    }
  }
  shutdown(d);
}

TEST_F(PythonClientTest, ATokenWithoutRpcIdIsOneClearError) {
  // From a kvtierd older than rpc_id the client does not guess whose a
  // token is: it ends the connection and says why.
  const fs::path sock = scratch_.path() / "fake.sock";
  for (const std::string form : {"", "--asyncio"}) {
    std::vector<std::string> args = {"--socket", sock.string()};
    if (!form.empty()) args.push_back(form);
    args.insert(args.end(), {"generate", "--prompt", "Hi"});
    FakeDaemon old(sock, FakeDaemon::Mode::kNoRpcId);
    auto r = client(args, scratch_.path());
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_EQ(r.err,
              "kvtier_client: kvtierd sent what this client cannot read (a generate.token "
              "without rpc_id: kvtierd is older than this client); the connection is closed\n")
        << "form " << form;
    EXPECT_EQ(old.request()["method"], "generate") << "form " << form;
  }
}

// Long requests (every sample to the context's end), cancelled at their
// first token and before it (the cancel then goes out once the first token
// names the request).
constexpr const char* kCancel = R"py(
import asyncio, json
sock, form = sys.argv[1], sys.argv[2]
LONG = dict(max_tokens=250, n=8, ignore_eos=True, temperature=0.8, seed=3)

def threaded():
    with kc.KvtierClient(sock, timeout=60) as k:
        at_first = k.generate("Wait", **LONG)
        for _ in at_first:
            at_first.cancel()
            break
        before = k.generate("Wait", **LONG)
        before.cancel()
        return {"at_first_token": at_first.result(), "before_first_token": before.result()}

async def asynchronous():
    async with await kc.AsyncKvtierClient.connect(sock, timeout=60) as k:
        at_first = await k.generate("Wait", **LONG)
        async for _ in at_first:
            await at_first.cancel()
            break
        before = await k.generate("Wait", **LONG)
        await before.cancel()
        return {"at_first_token": await at_first.result(),
                "before_first_token": await before.result()}

print(json.dumps(threaded() if form == "threaded" else asyncio.run(asynchronous())))
)py";

TEST_F(PythonClientTest, CancelEndsARequest) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  for (const std::string form : {"threaded", "asyncio"}) {
    auto r = script(kCancel, scratch_.path(), {d.socket_path(), form});
    ASSERT_EQ(r.exit_code, 0) << form << ": " << r.err;
    const json got = json::parse(r.out);
    for (const char* when : {"at_first_token", "before_first_token"}) {
      EXPECT_EQ(got[when]["finish_reason"], "cancelled") << form << " " << when;
      EXPECT_LT(got[when]["completion_tokens"].get<int>(), 8 * 250) << form << " " << when;
    }
  }
  // By kvtierd's request id, from the command line: an unknown one.
  auto unknown = client({"--socket", d.socket_path(), "cancel", "12345"}, scratch_.path());
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_TRUE(one_line(unknown.err)) << unknown.err;
  EXPECT_TRUE(test_util::contains(unknown.err, "-32602")) << unknown.err;
  shutdown(d);
}

TEST_F(PythonClientTest, TimeoutsAreOneClearLine) {
  const fs::path sock = scratch_.path() / "fake.sock";
  for (const std::string form : {"", "--asyncio"}) {
    std::vector<std::string> head = {"--socket", sock.string()};
    if (!form.empty()) head.push_back(form);
    {
      FakeDaemon silent(sock, FakeDaemon::Mode::kSilent);
      std::vector<std::string> args = head;
      args.insert(args.end(), {"--timeout", "0.2", "stats"});
      auto stats = client(args, scratch_.path());
      EXPECT_EQ(stats.exit_code, 5) << stats.err;
      EXPECT_EQ(stats.err, "kvtier_client: stats (id 1) got no answer from kvtierd within 0.2 s\n")
          << "form " << form;
      args = head;
      args.insert(args.end(), {"--timeout", "0.2", "generate", "--prompt", "x"});
      auto gen = client(args, scratch_.path());
      EXPECT_EQ(gen.exit_code, 5) << gen.err;
      EXPECT_EQ(gen.err,
                "kvtier_client: generate (id 1) got no answer from kvtierd within 0.2 s; "
                "cancelling it\n")
          << "form " << form;
    }
    {
      FakeDaemon stuck(sock, FakeDaemon::Mode::kFullBacklog);
      std::vector<std::string> args = head;
      args.insert(args.end(), {"--connect-timeout", "0.2", "stats"});
      auto r = client(args, scratch_.path());
      EXPECT_EQ(r.exit_code, 3) << r.err;
      EXPECT_EQ(r.err, "kvtier_client: cannot connect to kvtierd at " + sock.string() +
                           ": it accepted no connection within 0.2 s\n")
          << "form " << form;
    }
  }
  auto none =
      client({"--socket", (scratch_.path() / "none.sock").string(), "stats"}, scratch_.path());
  EXPECT_EQ(none.exit_code, 3);
  EXPECT_EQ(none.err, "kvtier_client: cannot connect to kvtierd at " +
                          (scratch_.path() / "none.sock").string() +
                          ": No such file or directory\n");
}

// socket_choose() with the service's path made a test's own.
constexpr const char* kSocketChoice = R"py(
import json
own_xdg, empty_xdg, service, missing = sys.argv[1:5]

def show(env, service_socket):
    c = kc.socket_choose(env, service_socket)
    return {"path": c.path, "note": c.note, "tried": c.tried}

print(json.dumps({
    "own": show({"XDG_RUNTIME_DIR": own_xdg}, service),
    "service": show({"XDG_RUNTIME_DIR": empty_xdg}, service),
    "neither": show({"XDG_RUNTIME_DIR": empty_xdg}, missing),
    "no_xdg": show({}, service),
    "env": show({"KVTIER_SOCKET": "/x.sock", "XDG_RUNTIME_DIR": own_xdg}, service),
    "default_service": kc.SERVICE_SOCKET,
}))
)py";

TEST_F(PythonClientTest, SocketSearchTriesTheUsersThenTheServices) {
  const fs::path own_xdg = scratch_.path() / "own", empty_xdg = scratch_.path() / "empty";
  fs::create_directories(own_xdg / "kvtier");
  fs::create_directories(empty_xdg / "kvtier");
  // A file that is not a socket is passed over as a missing one.
  test_util::write_file(empty_xdg / "kvtier/kvtierd.sock", "not a socket");
  const std::string own = (own_xdg / "kvtier/kvtierd.sock").string();
  const std::string empty = (empty_xdg / "kvtier/kvtierd.sock").string();
  const std::string service = (scratch_.path() / "service.sock").string();
  const std::string missing = (scratch_.path() / "missing.sock").string();
  FakeDaemon own_daemon(own, FakeDaemon::Mode::kSilent);
  FakeDaemon service_daemon(service, FakeDaemon::Mode::kSilent);
  auto r = script(kSocketChoice, scratch_.path(),
                  {own_xdg.string(), empty_xdg.string(), service, missing});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json got = json::parse(r.out);
  EXPECT_EQ(got["own"], json({{"path", own}, {"note", ""}, {"tried", {own, service}}}));
  EXPECT_EQ(got["service"], json({{"path", service},
                                  {"note", "using " + service + " (no socket at " + empty + ")"},
                                  {"tried", {empty, service}}}));
  EXPECT_EQ(got["neither"], json({{"path", empty}, {"note", ""}, {"tried", {empty, missing}}}));
  EXPECT_EQ(got["no_xdg"], json({{"path", service}, {"note", ""}, {"tried", {service}}}));
  EXPECT_EQ(got["env"], json({{"path", "/x.sock"}, {"note", ""}, {"tried", {"/x.sock"}}}));
  EXPECT_EQ(got["default_service"], kServiceSocket);
}

// The command line with the real service path, in a mount namespace of its
// own with a fresh /run: empty, or with /run/kvtier bound to a running
// kvtierd's folder. Nothing is made under this machine's /run.
TEST_F(PythonClientTest, CommandLineFallsBackToTheServiceSocketAndSaysSo) {
  if (run_process({"unshare", "-m", "--propagation", "private", "true"}, scratch_.path())
          .exit_code != 0) {
    GTEST_SKIP() << "unshare -m is not allowed here (it needs root or CAP_SYS_ADMIN): the "
                    "fallback to /run/kvtier/kvtierd.sock is not exercised by the command line "
                    "(SocketSearchTriesTheUsersThenTheServices covers the search)";
  }
  // sh -c SCRIPT sh RUN_KVTIER COMMAND...: /run/kvtier is RUN_KVTIER when given.
  const std::string in_private_run =
      "mount -t tmpfs kvtier-test /run || exit 90\n"
      "if [ -n \"$1\" ]; then mkdir /run/kvtier && mount --bind \"$1\" /run/kvtier || exit 91; fi\n"
      "shift; exec \"$@\"\n";
  const auto run = [&](const std::string& run_kvtier, const fs::path& xdg) {
    return run_process({"unshare", "-m", "--propagation", "private", "sh", "-c", in_private_run,
                        "sh", run_kvtier, python(), kPythonClient.string(), "stats"},
                       scratch_.path(), {"XDG_RUNTIME_DIR=" + xdg.string()}, {"KVTIER_SOCKET"});
  };
  const fs::path xdg = scratch_.path() / "xdg";  // no daemon of the user's own
  fs::create_directories(xdg);
  const std::string own = (xdg / "kvtier/kvtierd.sock").string();

  auto nowhere = run("", xdg);
  EXPECT_EQ(nowhere.exit_code, 3) << nowhere.err;
  EXPECT_EQ(nowhere.err, "kvtier_client: cannot connect to kvtierd at " + own +
                             ": No such file or directory (no socket at " + kServiceSocket +
                             " either)\n");

  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto service = run(d.dir().string(), xdg);
  ASSERT_EQ(service.exit_code, 0) << service.err;
  EXPECT_EQ(service.err,
            "kvtier_client: using " + kServiceSocket + " (no socket at " + own + ")\n");
  EXPECT_TRUE(json::parse(service.out).contains("requests_completed")) << service.out;
  shutdown(d);
}

// docs/http.md's examples run against the daemon scripts/run.sh starts.

// The model scripts/run.sh serves, read from the script.
std::string run_sh_model() {
  std::smatch m;
  const std::string text = test_util::read_file(kSourceDir / "scripts/run.sh");
  if (!std::regex_search(text, m, std::regex(R"(set -- --model (models/[^ ]+) )"))) return "";
  return m[1];
}

// The fenced ```python blocks of docs/http.md, in order.
std::vector<std::string> python_blocks() {
  std::vector<std::string> blocks;
  std::istringstream in(test_util::read_file(kHttpDoc));
  std::string line, block;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line == "```python") {
      inside = true;
      block.clear();
    } else if (inside && line == "```") {
      inside = false;
      blocks.push_back(block);
    } else if (inside) {
      block += line + "\n";
    }
  }
  return blocks;
}

// The block that imports `module`, or "".
std::string python_block_importing(const std::string& module) {
  for (const std::string& b : python_blocks())
    if (test_util::contains(b, "import " + module + "\n")) return b;
  return "";
}

class PythonClientHttpDocTest : public PythonClientTest {
 protected:
  void SetUp() override {
    PythonClientTest::SetUp();
    if (IsSkipped()) return;
    model_ = run_sh_model();
    ASSERT_FALSE(model_.empty()) << "scripts/run.sh names no --model";
    ASSERT_TRUE(test_util::contains(test_util::read_file(kHttpDoc), "serves " + model_))
        << "docs/http.md does not say which model scripts/run.sh serves";
  }
  // What JSON-RPC generates greedily for `prompt`, as the examples ask HTTP.
  static std::string greedy(Daemon& d, const std::string& prompt, json extra = json::object()) {
    json params = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}};
    params.update(extra);
    auto r = d.connect()->call(request(1, "generate", params));
    EXPECT_TRUE(r && r->contains("result"));
    return r && r->contains("result") ? (*r)["result"]["text"].get<std::string>() : "";
  }
  std::string model_;  // e.g. models/fortunes-char-5m
};

TEST_F(PythonClientHttpDocTest, CurlExamplesWorkAsWritten) {
  if (run_process({"curl", "--version"}, scratch_.path()).exit_code != 0)
    GTEST_SKIP() << "curl is not installed: docs/http.md's curl examples are not run";
  // The indented block that begins with the models request.
  const std::string doc = test_util::read_file(kHttpDoc);
  const std::string first = "    curl --unix-socket \"$SOCK\" http://localhost/v1/models\n";
  const auto begin = doc.find(first);
  ASSERT_NE(begin, std::string::npos) << "docs/http.md has no line: " << first;
  const auto end = doc.find("\n\n", doc.find("\"stream\": true}'", begin));
  ASSERT_NE(end, std::string::npos);
  const fs::path examples = scratch_.write("curl.sh", doc.substr(begin, end - begin) + "\n");

  Daemon d({"--model", (kSourceDir / model_).string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto r =
      run_process({"bash", "-e", examples.string()}, scratch_.path(), {"SOCK=" + d.socket_path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string name = fs::path(model_).filename();
  EXPECT_TRUE(test_util::contains(r.out, "\"id\":\"" + name + "\"")) << r.out;
  EXPECT_FALSE(test_util::contains(r.out, "\"error\"")) << r.out;
  EXPECT_TRUE(test_util::contains(
      r.out, json(greedy(d, "Q: What is a computer?\nA:")).dump()))  // the completion
      << r.out;
  EXPECT_TRUE(r.out.ends_with("data: [DONE]\n\n")) << r.out;  // the streamed chat
  shutdown(d);
}

TEST_F(PythonClientHttpDocTest, HttpxSnippetWorksAsWritten) {
  const std::string snippet = python_block_importing("httpx");
  ASSERT_FALSE(snippet.empty()) << "docs/http.md has no python block importing httpx";
  ASSERT_FALSE(test_util::contains(snippet, "openai"));
  if (run_process({"/usr/bin/python3", "-c", "import httpx"}, scratch_.path()).exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import httpx (Debian's python3-httpx, which "
                    "scripts/install-deps.sh installs): docs/http.md's httpx example is not run";
  }
  // On kvtierd's default socket, which the snippet falls back to.
  const fs::path xdg = scratch_.path() / "xdg";
  Daemon d({"--model", (kSourceDir / model_).string(), "--socket",
            (xdg / "kvtier/kvtierd.sock").string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto r =
      run_process({"/usr/bin/python3", scratch_.write("doc_httpx_example.py", snippet).string()},
                  scratch_.path(), {"XDG_RUNTIME_DIR=" + xdg.string()}, {"KVTIER_SOCKET"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string name = fs::path(model_).filename();
  EXPECT_TRUE(r.out.starts_with(name + "\n")) << r.out;
  EXPECT_TRUE(test_util::contains(r.out, name + "\n" + greedy(d, "Q: What is a computer?\nA:")))
      << r.out;
  // The chat, through the model's template (Q:/A:, stopping at the next Q:).
  EXPECT_TRUE(r.out.ends_with(greedy(d, "Q: What is love?\nA:", {{"stop", {"\nQ:"}}}) + "\n"))
      << r.out;
  shutdown(d);
}

TEST_F(PythonClientHttpDocTest, OpenAiSdkSnippetRunsWhereTheSdkIs) {
  const std::string snippet = python_block_importing("openai");
  ASSERT_FALSE(snippet.empty()) << "docs/http.md has no python block importing openai";
  const fs::path file = scratch_.write("doc_openai_example.py", snippet);
  auto parsed = run_process({python(), "-m", "py_compile", file.string()}, scratch_.path());
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err;
  if (run_process({"/usr/bin/python3", "-c", "import openai, httpx"}, scratch_.path()).exit_code !=
      0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import openai (not packaged for Debian 12; pip "
                    "install openai): docs/http.md's SDK example only parses here";
  }
  const fs::path xdg = scratch_.path() / "xdg";
  Daemon d({"--model", (kSourceDir / model_).string(), "--socket",
            (xdg / "kvtier/kvtierd.sock").string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto r = run_process({"/usr/bin/python3", file.string()}, scratch_.path(),
                       {"XDG_RUNTIME_DIR=" + xdg.string()}, {"KVTIER_SOCKET"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with(greedy(d, "Q: What is a computer?\nA:") + "\n")) << r.out;
  shutdown(d);
}

}  // namespace
}  // namespace kvtier

// Helpers for the black-box tests of kvtierd and its clients
// (daemon_test.cpp, ctl_test.cpp): the real binary started on a socket in a
// fresh temporary directory, a plain AF_UNIX JSON-RPC client, and the
// in-process engine reference results are compared with. Every wait is
// bounded: a daemon that hangs fails the test instead of hanging the suite,
// and the fixture kills and reaps whatever is still running.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/generator.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "test_util.h"
#include "util/child_process.h"

namespace kvtier::daemon_test {

using nlohmann::json;
using namespace std::chrono_literals;

// kvtierctl, beside kvtierd in the build tree (build/daemon/kvtierd,
// build/ctl/kvtierctl).
inline const std::filesystem::path kCtlPath =
    std::filesystem::path(KVTIER_DAEMON_PATH).parent_path().parent_path() / "ctl/kvtierctl";

inline const std::filesystem::path kModelDir =
    std::filesystem::path(KVTIER_SOURCE_DIR) / "models/fortunes-char";
// Generous: the suite shares two cores with other work.
inline constexpr auto kTimeout = 60s;

// A plain AF_UNIX client with line framing and timeouts.
class Client {
 public:
  // Tries once; invalid() on failure.
  explicit Client(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) close();
  }
  // Takes over a connected socket.
  static std::unique_ptr<Client> adopt(int fd) {
    std::unique_ptr<Client> c(new Client());
    c->fd_ = fd;
    return c;
  }
  // Connects to 127.0.0.1:`port` (a TCP listener); nullptr on failure.
  static std::unique_ptr<Client> tcp(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      if (fd >= 0) ::close(fd);
      return nullptr;
    }
    return adopt(fd);
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool valid() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send_raw(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  bool send(const json& j) { return send_raw(j.dump() + "\n"); }

  // The next line as JSON; nullopt on timeout, EOF or bad JSON.
  std::optional<json> read(std::chrono::milliseconds timeout = kTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        json j = json::parse(buf_.substr(0, nl), nullptr, false);
        buf_.erase(0, nl + 1);
        if (j.is_discarded()) return std::nullopt;
        return j;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  // Whatever bytes arrive next (at least one, at most `max_bytes`; those
  // already read past a line first), unframed; nullopt on timeout or EOF.
  std::optional<std::string> read_raw(std::chrono::steady_clock::duration timeout = kTimeout,
                                      std::size_t max_bytes = 65536) {
    if (!buf_.empty()) return std::exchange(buf_, std::string());
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    pollfd p{fd_, POLLIN, 0};
    if (ms <= 0 || ::poll(&p, 1, static_cast<int>(ms)) <= 0) return std::nullopt;
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, std::min(sizeof(chunk), max_bytes), 0);
    if (n <= 0) return std::nullopt;
    return std::string(chunk, static_cast<std::size_t>(n));
  }

  // Sends a request and returns its response, collecting notifications.
  std::optional<json> call(const json& request, std::vector<json>* notifications = nullptr) {
    if (!send(request)) return std::nullopt;
    for (;;) {
      auto msg = read();
      if (!msg) return std::nullopt;
      if (!msg->contains("id")) {
        if (notifications) notifications->push_back(*msg);
        continue;
      }
      return msg;
    }
  }

 private:
  Client() = default;
  int fd_ = -1;
  std::string buf_;
};

// A one-byte message with room for one descriptor (SCM_RIGHTS).
struct FdMessage {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

// A connection to `path` made by a child process running as `uid` and
// `gid`, handed back to this process: the daemon sees that uid, since
// SO_PEERCRED is the connecting process's. Lets a root test play another
// user without executing anything as it. nullptr (with the reason in `why`)
// when the child could not connect, e.g. a folder on the path is closed to
// that uid. REQUIRES: root.
inline std::unique_ptr<Client> connect_as(const std::string& path, uid_t uid, gid_t gid,
                                          std::string& why) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    why = "socketpair failed";
    return nullptr;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  auto child = util::fork_child([&]() -> int {
    if (::setgroups(1, &gid) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) return 100;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 101;
    FdMessage m;
    cmsghdr* cmsg = CMSG_FIRSTHDR(&m.msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
    return ::sendmsg(pair[1], &m.msg, 0) == 1 ? 0 : 102;
  });
  ::close(pair[1]);
  if (!child) {
    ::close(pair[0]);
    why = child.error();
    return nullptr;
  }
  int fd = -1;
  pollfd p{pair[0], POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(kTimeout.count() * 1000)) == 1) {
    FdMessage m;
    if (::recvmsg(pair[0], &m.msg, MSG_CMSG_CLOEXEC) == 1) {
      if (cmsghdr* cmsg = CMSG_FIRSTHDR(&m.msg); cmsg && cmsg->cmsg_type == SCM_RIGHTS)
        std::memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
    }
  }
  ::close(pair[0]);
  // A child stuck in connect must not hang the test: killed then.
  const int status = fd < 0 ? child->stop(std::chrono::milliseconds(0)).status : child->wait();
  if (fd < 0) {
    why = "a process as uid " + std::to_string(uid) + " could not connect to " + path + " (exit " +
          std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
    return nullptr;
  }
  return Client::adopt(fd);
}

inline json request(int id, const std::string& method, json params = json::object()) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

// The result of one call on `c`, or {} after a failed expectation.
inline json call_result(Client& c, const std::string& method, json params = json::object()) {
  auto r = c.call(request(2, method, std::move(params)));
  EXPECT_TRUE(r && r->contains("result")) << method << ": " << (r ? r->dump() : "no answer");
  return r && r->contains("result") ? (*r)["result"] : json::object();
}

// The environment of this process plus `extra` ("NAME=VALUE"): a child's
// whole environment (SpawnOptions::env).
inline std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// The kvtierd child process.
class Daemon {
 public:
  // `env`: extra "NAME=VALUE" entries for the child's environment. The
  // daemon runs the bundled model, on a socket in its own directory, and
  // logs at warning level unless `extra_args` names --model, --socket (a
  // restart on the same socket) or --log-level; its stderr goes to
  // log_path().
  explicit Daemon(std::vector<std::string> extra_args = {}, std::vector<std::string> env = {}) {
    socket_path_ = (dir_.path() / "kvtierd.sock").string();
    log_path_ = (dir_.path() / "kvtierd.log").string();
    std::vector<std::string> args = {KVTIER_DAEMON_PATH};
    const auto names = [&](const char* flag) {
      return std::find(extra_args.begin(), extra_args.end(), flag) != extra_args.end();
    };
    if (auto given = std::find(extra_args.begin(), extra_args.end(), "--socket");
        given != extra_args.end() && given + 1 != extra_args.end()) {
      socket_path_ = *(given + 1);
    } else {
      args.insert(args.end(), {"--socket", socket_path_});
    }
    if (!names("--model")) args.insert(args.end(), {"--model", kModelDir.string()});
    if (!names("--log-level")) args.insert(args.end(), {"--log-level", "warning"});
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    auto child = util::spawn_child(args, {.stderr_fd = log_fd, .env = environment_with(env)});
    if (log_fd >= 0) ::close(log_fd);
    if (child)
      child_ = std::move(*child);
    else
      ADD_FAILURE() << child.error();
  }

  const std::string& socket_path() const { return socket_path_; }
  const std::string& log_path() const { return log_path_; }

  // What the daemon has written to stderr so far.
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Polls the log until it contains `needle`; false on timeout.
  bool wait_log(const std::string& needle, std::chrono::milliseconds timeout = kTimeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (test_util::contains(log(), needle)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  const std::filesystem::path& dir() const { return dir_.path(); }
  pid_t pid() const { return child_.pid(); }

  // Polls until the daemon accepts a connection; false if it exits or the
  // timeout passes first.
  bool wait_ready() {
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (exited()) return false;
      Client c(socket_path_);
      if (c.valid()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  std::unique_ptr<Client> connect() const { return std::make_unique<Client>(socket_path_); }

  // Whether it has exited (or never started).
  bool exited() { return child_.pid() <= 0 || child_.wait(0ms).has_value(); }

  // The raw wait status once the process exits; nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout = kTimeout) {
    return child_.wait(timeout);
  }

 private:
  test_util::TempDir dir_;
  std::string socket_path_;
  std::string log_path_;
  util::ChildProcess child_;  // last: killed and reaped before its folder goes
};

// A process stopped (SIGSTOP) until the object goes (SIGCONT): a daemon
// that holds what it is sent without answering, mid-request.
class Stopped {
 public:
  explicit Stopped(pid_t pid) : pid_(pid) { EXPECT_EQ(::kill(pid_, SIGSTOP), 0); }
  ~Stopped() { ::kill(pid_, SIGCONT); }
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;

 private:
  pid_t pid_;
};

inline ::testing::AssertionResult exited_zero(std::optional<int> status) {
  if (!status) return ::testing::AssertionFailure() << "kvtierd did not exit in time";
  if (!WIFEXITED(*status)) return ::testing::AssertionFailure() << "kvtierd was killed by a signal";
  if (WEXITSTATUS(*status) != 0) {
    return ::testing::AssertionFailure() << "kvtierd exited with " << WEXITSTATUS(*status);
  }
  return ::testing::AssertionSuccess();
}

// Stops the daemon through the protocol and checks it exits 0.
inline void shutdown(Daemon& d) {
  auto c = d.connect();
  ASSERT_TRUE(c->valid());
  auto r = c->call(request(999, "shutdown"));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(exited_zero(d.wait_exit()));
}

// The daemon's `stats`, asked on a connection of its own; null when it
// does not answer.
inline json stats(const Daemon& d) {
  Client c(d.socket_path());
  auto r = c.call(request(1, "stats"));
  return r && r->contains("result") ? (*r)["result"] : json();
}

// Waits until the daemon has no request pending and no KV block in use;
// its stats then (a test failure, with its log, when it never is).
inline json wait_idle(const Daemon& d) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  json s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = stats(d);
    if (s.is_object() && s["pending"] == 0 && s["blocks_used"] == 0) return s;
    std::this_thread::sleep_for(10ms);
  }
  ADD_FAILURE() << "the daemon did not become idle: " << s.dump() << "\n" << d.log();
  return s;
}

// A program run to completion: its exit code (-1: killed by a signal, it
// did not finish within the timeout and was killed, or it could not start)
// and its output.
struct ProcessResult {
  int exit_code = -1;
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

// Runs `args` (args[0] looked up in PATH) to completion with `env` as its
// whole environment (environment_with adds to this process's) and `in` as
// stdin; stdout and stderr go through files in `dir`. Killed after
// `timeout`. When it cannot start at all, err says why.
inline ProcessResult run_process(std::vector<std::string> args, const std::filesystem::path& dir,
                                 std::vector<std::string> env = environment_with({}),
                                 const std::filesystem::path& in = "/dev/null",
                                 std::chrono::milliseconds timeout = kTimeout) {
  const auto out_path = dir / "out.txt", err_path = dir / "err.txt";
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int in_fd = ::open(in.c_str(), O_RDONLY | O_CLOEXEC);
  const auto ran = util::run_child(args,
                                   {.stdin_fd = in_fd,
                                    .stdout_fd = out_fd,
                                    .stderr_fd = err_fd,
                                    .env = std::move(env),
                                    .search_path = true},
                                   timeout);
  ::close(in_fd);
  ::close(out_fd);
  ::close(err_fd);
  ProcessResult r;
  if (ran && !ran->killed && WIFEXITED(ran->status)) r.exit_code = WEXITSTATUS(ran->status);
  r.out = test_util::read_file(out_path);
  r.err = ran ? test_util::read_file(err_path) : ran.error();
  return r;
}

// kvtierd run to completion, for start-up errors: its exit status and what
// it wrote to stderr (or why it could not start). `in_child` runs in the
// child just before exec (a sandbox, another user): async-signal-safe calls
// only.
struct RunResult {
  std::optional<int> status;
  std::string err;
};

inline RunResult run_kvtierd(std::vector<std::string> args,
                             std::function<void()> in_child = nullptr) {
  args.insert(args.begin(), KVTIER_DAEMON_PATH);
  int pipefd[2];
  EXPECT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  auto child = util::spawn_child(args, {.stderr_fd = pipefd[1], .in_child = std::move(in_child)});
  ::close(pipefd[1]);
  RunResult r;
  if (!child) {
    ::close(pipefd[0]);
    r.err = child.error();
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{pipefd[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char chunk[4096];
    const ssize_t n = ::read(pipefd[0], chunk, sizeof(chunk));
    if (n <= 0) break;
    r.err.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(pipefd[0]);
  r.status = child->wait(kTimeout);  // killed past that, when `child` goes
  return r;
}

inline bool exited_nonzero(const RunResult& r) {
  return r.status && WIFEXITED(*r.status) && WEXITSTATUS(*r.status) != 0;
}

// Flags kvtierd must refuse at start-up, and what its message must say.
struct RefusedFlags {
  std::vector<std::string> args;
  std::string says;
};

// Runs kvtierd with base + each case's flags: each must exit non-zero with
// its `says` in stderr.
inline void expect_refused(const std::vector<std::string>& base,
                           const std::vector<RefusedFlags>& cases) {
  for (const RefusedFlags& k : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), k.args.begin(), k.args.end());
    const RunResult r = run_kvtierd(args);
    EXPECT_TRUE(exited_nonzero(r)) << k.args.front() << " " << k.args.back();
    EXPECT_TRUE(test_util::contains(r.err, k.says)) << k.args.front() << ": " << r.err;
  }
}

inline int error_code(const std::optional<json>& response) {
  if (!response || !response->contains("error")) return 0;
  return (*response)["error"].value("code", 0);
}

// What the engine produces in-process for the same request: the reference
// every daemon result is compared with.
inline Generation reference(const std::string& prompt, int max_tokens, float temperature,
                            std::uint64_t seed) {
  Model* model = &test_util::bundled_model().model;
  const Tokenizer* tokenizer = test_util::bundled_model().tokenizer.get();
  auto tokens = tokenizer->encode(prompt);
  EXPECT_TRUE(tokens.has_value());
  const int page_size = 16;
  tiers::BlockPool pool(model->kv_layout(page_size).block_bytes(),
                        model->config().block_size / page_size + 1);
  GenerateOptions options;
  options.sampling = {temperature, 0, 1.0f, seed};
  options.max_tokens = max_tokens;
  options.page_size = page_size;
  auto out = generate(*model, pool, tokenizer, *tokens, options);
  EXPECT_TRUE(out.has_value());
  return out ? *out : Generation{};
}

inline json generate_params(const std::string& prompt, int max_tokens, float temperature,
                            std::uint64_t seed, bool stream = false) {
  return {{"prompt", prompt},
          {"max_tokens", max_tokens},
          {"temperature", temperature},
          {"seed", seed},
          {"stream", stream}};
}

}  // namespace kvtier::daemon_test

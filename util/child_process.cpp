#include "util/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace kvtier::util {

namespace {

using namespace std::chrono_literals;

// argv-style arrays, built before fork: the child of a process with threads
// may not allocate.
std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the child: SIGTERM when the thread that forked it ends. The parent may
// have died before prctl took, which no signal would then report: a child
// whose parent has changed gives up. The thread that forked waits (on
// await_child) until this has run, so it cannot have ended before.
void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);
}

// fork(), with a close-on-exec pipe in `pipe` that await_child reads: the
// child's pid, 0 in the child, or why not (nothing left open then).
std::expected<pid_t, std::string> fork_with_pipe(int pipe[2]) {
  if (::pipe2(pipe, O_CLOEXEC) != 0)
    return std::unexpected("pipe: " + std::string(std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipe[0]);
    ::close(pipe[1]);
    return std::unexpected("fork: " + std::string(std::strerror(err)));
  }
  return pid;
}

// In the parent: waits until the child closes its end of `pipe` (at exec,
// or once die_with_parent has run), then closes this end. The errno the
// child wrote there first, or 0.
int await_child(int pipe[2]) {
  ::close(pipe[1]);
  int err = 0;
  ssize_t n = 0;
  while ((n = ::read(pipe[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  ::close(pipe[0]);
  return n == static_cast<ssize_t>(sizeof err) ? err : 0;
}

void redirect(int from, int to) {
  if (from >= 0 && from != to) ::dup2(from, to);  // the copy is not close-on-exec
}

}  // namespace

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) (void)stop(stop_grace_);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stop_grace_(other.stop_grace_),
      status_(std::exchange(other.status_, std::nullopt)),
      killed_(other.killed_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) (void)stop(stop_grace_);
    pid_ = std::exchange(other.pid_, -1);
    stop_grace_ = other.stop_grace_;
    status_ = std::exchange(other.status_, std::nullopt);
    killed_ = other.killed_;
  }
  return *this;
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0 && !status_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
    } else if (r < 0 && errno != EINTR) {
      status_ = -1;  // not ours to wait for any more (reaped elsewhere)
    } else if (r == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(10ms, deadline - now));
    }
  }
  return status_;
}

int ChildProcess::wait() {
  while (pid_ > 0 && !status_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, 0);
    if (r == pid_)
      status_ = status;
    else if (r < 0 && errno != EINTR)
      status_ = -1;
  }
  return status_.value_or(-1);
}

ChildExit ChildProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return {};
  if (!wait(0ms)) {
    if (grace > 0ms) {
      ::kill(pid_, SIGTERM);
      (void)wait(grace);
    }
    if (!status_) {
      ::kill(pid_, SIGKILL);
      killed_ = true;
      (void)wait();
    }
  }
  return {*status_, killed_};
}

std::expected<ChildProcess, std::string> spawn_child(const std::vector<std::string>& argv,
                                                     const SpawnOptions& options) {
  if (argv.empty()) return std::unexpected(std::string("spawn_child: no program to run"));
  std::vector<char*> args = c_strings(argv);
  std::vector<char*> envp = options.env ? c_strings(*options.env) : std::vector<char*>();
  // exec's errno comes back through a close-on-exec pipe: end of file means
  // exec succeeded, so a program that cannot run is told from one that ran.
  int report[2];
  const pid_t parent = ::getpid();
  const auto pid = fork_with_pipe(report);
  if (!pid) return std::unexpected(pid.error());
  if (*pid == 0) {
    // The child: only async-signal-safe calls from here to exec.
    redirect(options.stdin_fd, STDIN_FILENO);
    redirect(options.stdout_fd, STDOUT_FILENO);
    redirect(options.stderr_fd, STDERR_FILENO);
    if (options.in_child) options.in_child();
    die_with_parent(parent);  // after in_child, whose setuid would clear it
    if (options.search_path && options.env)
      ::execvpe(args[0], args.data(), envp.data());
    else if (options.search_path)
      ::execvp(args[0], args.data());
    else if (options.env)
      ::execve(args[0], args.data(), envp.data());
    else
      ::execv(args[0], args.data());
    const int err = errno;
    (void)!::write(report[1], &err, sizeof err);
    ::_exit(127);
  }
  ChildProcess child(*pid, options.stop_grace);
  if (const int err = await_child(report); err != 0) {
    (void)child.wait();
    return std::unexpected("cannot run " + argv[0] + ": " + std::strerror(err));
  }
  return child;
}

std::expected<ChildExit, std::string> run_child(const std::vector<std::string>& argv,
                                                const SpawnOptions& options,
                                                std::chrono::milliseconds timeout) {
  auto child = spawn_child(argv, options);
  if (!child) return std::unexpected(child.error());
  (void)child->wait(timeout);
  return child->stop(0ms);
}

std::expected<ChildProcess, std::string> fork_child(const std::function<int()>& body) {
  int started[2];
  const pid_t parent = ::getpid();
  const auto pid = fork_with_pipe(started);
  if (!pid) return std::unexpected(pid.error());
  if (*pid == 0) {
    die_with_parent(parent);
    ::close(started[0]);
    ::close(started[1]);  // the parent's await_child returns
    ::_exit(body());
  }
  (void)await_child(started);
  return ChildProcess(*pid, 0ms);
}

}  // namespace kvtier::util

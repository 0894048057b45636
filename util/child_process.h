// Child processes for the tests and the benches (kvtierd, redis-server,
// kvtierctl, mkfs, the test binary itself), started one way: each gets
// SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG), so a run
// killed by a signal, which runs no destructor, leaves nothing running
// behind it; and each is owned by a ChildProcess that stops and reaps it
// when it goes.
//
// REQUIRES (every function that starts one): called from a thread that
// lives as long as the child should: a test's thread, a bench's main thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::util {

// How a child ended.
struct ChildExit {
  // The raw wait status: WIFEXITED / WEXITSTATUS / WTERMSIG read it; -1
  // when it could not be waited for (someone else reaped it).
  int status = -1;
  // It did not end by itself in the time it had, and was sent SIGKILL.
  bool killed = false;
};

struct SpawnOptions {
  // The child's stdin, stdout and stderr (each dup2'ed, so the descriptor
  // may be close-on-exec); -1 leaves this process's.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // The child's whole environment, "NAME=VALUE"; nullopt: this process's
  // (environ as it is at exec).
  std::optional<std::vector<std::string>> env{};
  // argv[0] is looked up in PATH (execvp) instead of taken as a path.
  bool search_path = false;
  // Runs in the child after the redirections, just before exec (a sandbox,
  // another uid, an inherited socket): async-signal-safe calls only, as
  // this process may have threads; on failure it calls _exit with its own
  // code. A credential change here keeps the parent-death signal, which is
  // set after it (the kernel clears it on setuid).
  std::function<void()> in_child{};
  // How long the owner's destructor lets the child end on SIGTERM before
  // SIGKILL; zero (the default) sends SIGKILL at once, as a crash would.
  std::chrono::milliseconds stop_grace{0};
};

// Owns one child: stops it (stop(stop_grace)) and reaps it when destroyed,
// unless it has been reaped already. Move-only; a default one owns none.
// Not thread-safe: one thread waits for and stops a child.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The child's pid (kept after it is reaped, for messages); -1 for none.
  pid_t pid() const { return pid_; }

  // Its raw wait status once it has exited, waiting up to `timeout` for
  // that (zero: only looks); nullopt while it still runs, or owning none.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // Waits as long as it takes: its raw wait status (-1 owning none).
  int wait();

  // Ends it: SIGTERM and up to `grace` to exit, then SIGKILL (at once when
  // `grace` is zero); reaped either way. A child that has already exited
  // just gives its status. Calling it again returns the same end.
  ChildExit stop(std::chrono::milliseconds grace);

 private:
  friend std::expected<ChildProcess, std::string> spawn_child(const std::vector<std::string>&,
                                                              const SpawnOptions&);
  friend std::expected<ChildProcess, std::string> fork_child(const std::function<int()>&);
  ChildProcess(pid_t pid, std::chrono::milliseconds stop_grace)
      : pid_(pid), stop_grace_(stop_grace) {}

  pid_t pid_ = -1;
  std::chrono::milliseconds stop_grace_{0};
  std::optional<int> status_;  // once reaped
  bool killed_ = false;
};

// Forks and execs argv (argv[0] a path, or a name with search_path), as
// `options` says. Returns once the child has exec'ed, or the reason it could
// not start: "cannot run ARGV0: No such file or directory" when exec failed
// (the child is reaped then), or fork's or pipe's error.
// REQUIRES: argv non-empty.
std::expected<ChildProcess, std::string> spawn_child(const std::vector<std::string>& argv,
                                                     const SpawnOptions& options = {});

// spawn_child, then waits up to `timeout` for the child to end, and kills
// it past that (killed: true).
std::expected<ChildExit, std::string> run_child(const std::vector<std::string>& argv,
                                                const SpawnOptions& options,
                                                std::chrono::milliseconds timeout);

// Forks a child that runs `body` and exits with what it returns: for a test
// whose child runs this process's own code (takes a lock, plays another
// uid, meets a file-size limit) rather than a program. Returns once the
// child has its parent-death signal, which a credential change in `body`
// clears (the kernel's rule). The child of a process with threads has only
// the thread that forked, so `body` must not wait on another thread's work;
// it keeps every descriptor, so a spawn_child on another thread meanwhile
// returns only once this child has exited or exec'ed.
std::expected<ChildProcess, std::string> fork_child(const std::function<int()>& body);

}  // namespace kvtier::util

#include "bench/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace kvtier::bench {

pid_t spawn_child(const std::vector<std::string>& argv, int out_fd, void (*in_child)()) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The child: only async-signal-safe calls from here to exec.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took
  if (out_fd >= 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
  }
  if (in_child) in_child();
  ::execv(args[0], args.data());
  ::_exit(127);
}

}  // namespace kvtier::bench

// Starting the programs a bench drives (kvtierd, redis-server) as children
// that do not outlive it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvtier::bench {

// Forks and execs argv (argv[0] a path), with the child's stdout and stderr
// on out_fd when it is >= 0. The child gets SIGTERM when the thread that
// started it ends (PR_SET_PDEATHSIG), so a bench killed by a signal, which
// runs no destructor, leaves no daemon or redis-server running behind it.
// `in_child`, when given, runs in the child just before exec (a test
// sandboxes the daemon there): only async-signal-safe calls. Returns the
// child's pid, or -1 when fork failed.
// REQUIRES: argv non-empty; called from a thread that lives as long as the
// child should (the soak starts its children from its main thread).
pid_t spawn_child(const std::vector<std::string>& argv, int out_fd = -1,
                  void (*in_child)() = nullptr);

}  // namespace kvtier::bench

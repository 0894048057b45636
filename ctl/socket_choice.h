// Where kvtierctl finds kvtierd when -s/--socket is not given.
//
//   1. $KVTIER_SOCKET, when set;
//   2. a daemon of the user's own: $XDG_RUNTIME_DIR/kvtier/kvtierd.sock
//      (kvtierd's default in a user session), when that socket exists;
//   3. the service's: /run/kvtier/kvtierd.sock (kvtierd.service), when it
//      exists;
//   4. else the first of 2 and 3, so that the error names every path tried.
//
// A user with both a daemon of their own and the service reaches their own;
// one with only the service reaches it without flags, told on stderr which
// socket was used (`note`).
#pragma once

#include <string>
#include <vector>

namespace kvtier::ctl {

inline constexpr const char* kServiceSocket = "/run/kvtier/kvtierd.sock";

struct SocketChoice {
  std::string path;
  std::string note;                // for stderr when the choice was not the first candidate
  std::vector<std::string> tried;  // the candidates, in order: for "cannot connect" errors
};

// `env_socket` and `runtime_dir` are $KVTIER_SOCKET and $XDG_RUNTIME_DIR
// (null or empty when unset).
SocketChoice socket_choose(const char* env_socket, const char* runtime_dir);

}  // namespace kvtier::ctl

#include "ctl/socket_choice.h"

#include <sys/stat.h>

namespace kvtier::ctl {

namespace {

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

SocketChoice socket_choose(const char* env_socket, const char* runtime_dir) {
  SocketChoice c;
  if (env_socket && *env_socket) {
    c.path = env_socket;
    c.tried = {c.path};
    return c;
  }
  if (runtime_dir && *runtime_dir)
    c.tried.push_back(std::string(runtime_dir) + "/kvtier/kvtierd.sock");
  c.tried.push_back(kServiceSocket);
  for (std::size_t i = 0; i < c.tried.size(); ++i) {
    if (!is_socket(c.tried[i])) continue;
    c.path = c.tried[i];
    if (i > 0) c.note = "using " + c.path + " (no socket at " + c.tried[0] + ")";
    return c;
  }
  c.path = c.tried.front();
  return c;
}

}  // namespace kvtier::ctl

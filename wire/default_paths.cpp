#include "wire/default_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace kvtier::wire {

std::string default_socket_path(std::string_view file) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime && *runtime) return std::string(runtime) + "/kvtier/" + std::string(file);
  return "/run/kvtier/" + std::string(file);
}

std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed =
        (exe.parent_path() / "../share/kvtier/models/fortunes-char").lexically_normal();
    if (fs::exists(installed / "config.json", ec)) return installed.string();
  }
  return KVTIER_DEFAULT_MODEL_DIR;
}

std::expected<void, std::string> socket_dir_prepare(const std::string& socket_path,
                                                    const std::string& default_path) {
  const auto dir = std::filesystem::path(socket_path).parent_path();
  if (dir.empty()) return {};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // One wording whether the folder or the socket in it cannot be made
  // (docs/troubleshooting.md quotes it).
  std::string why;
  if (ec) {
    why = "cannot create the socket in " + dir.string() + ": " + ec.message();
  } else if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    why = "cannot create the socket in " + dir.string() + ": " + std::strerror(errno);
  }
  if (why.empty()) return {};
  if (socket_path == default_path) {
    why += std::getenv("XDG_RUNTIME_DIR")
               ? " (pass --socket PATH)"
               : " (pass --socket PATH, or set XDG_RUNTIME_DIR to serve in "
                 "$XDG_RUNTIME_DIR/kvtier; the system path is for the service, see "
                 "daemon/systemd)";
  }
  return std::unexpected(why);
}

}  // namespace kvtier::wire

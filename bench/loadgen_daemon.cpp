#include "bench/loadgen_daemon.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <thread>

#include "ctl/rpc_client.h"
#include "util/child_process.h"

namespace kvtier::bench {

namespace {

// `folder/program` beside the running bench binary's folder.
std::string in_build_tree(const char* argv0, const char* folder, const char* program) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) self = std::filesystem::absolute(argv0);
  return (self.parent_path().parent_path() / folder / program).string();
}

}  // namespace

std::string default_kvtierd(const char* argv0) { return in_build_tree(argv0, "daemon", "kvtierd"); }

std::string default_router(const char* argv0) {
  return in_build_tree(argv0, "router", "kvtier-router");
}

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds millis(double s) {
  return std::chrono::milliseconds(static_cast<long>(s * 1000));
}

}  // namespace

std::map<std::string, std::string> daemon_flags(const std::string& binary) {
  std::map<std::string, std::string> flags;
  const std::string cmd = "'" + binary + "' --help 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return flags;
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  ::pclose(p);
  // CLI11: "  -h,--help   Print...", "  --max-kv-tokens INT=4096   KV positions".
  static const std::regex line_re(R"(^\s+(?:-\w,)?--([a-z0-9][a-z0-9-]*)(?: ([^ ]+))?)");
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    std::smatch m;
    if (std::regex_search(line, m, line_re)) {
      std::string type = m[2].matched ? m[2].str() : "";
      // A value type is upper case (TEXT, INT:..., BOOLEAN); anything else is
      // the start of the description of a flag without a value.
      if (!type.empty() && !std::isupper(static_cast<unsigned char>(type[0]))) type.clear();
      flags[m[1].str()] = type;
      // Aliases on the same line: "--prefix-cache,--no-prefix-cache{false}".
      static const std::regex alias_re(R"(,--([a-z0-9][a-z0-9-]*))");
      const std::string names = line.substr(0, line.find(' ', m.position(1)));
      for (std::sregex_iterator a(names.begin(), names.end(), alias_re), e; a != e; ++a)
        flags[(*a)[1].str()] = "";
    }
    start = end + 1;
  }
  return flags;
}

std::expected<std::unique_ptr<DaemonProcess>, std::string> DaemonProcess::start(
    const std::string& binary, const std::vector<std::string>& args, const std::string& log_path,
    double ready_timeout_s) {
  if (::access(binary.c_str(), X_OK) != 0)
    return std::unexpected("kvtierd not found or not executable: " + binary);
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  char dir_template[] = "/tmp/kvtier-soak-XXXXXX";
  if (!::mkdtemp(dir_template)) return std::unexpected(std::string("mkdtemp failed"));
  d->dir_ = dir_template;
  d->socket_ = d->dir_ + "/kvtierd.sock";
  d->log_path_ = log_path;
  d->binary_ = binary;
  d->args_ = args;
  if (auto ok = d->spawn(ready_timeout_s); !ok) return std::unexpected(ok.error());
  return d;
}

std::expected<void, std::string> DaemonProcess::spawn(double ready_timeout_s) {
  std::vector<std::string> argv = {binary_, "--socket", socket_};
  argv.insert(argv.end(), args_.begin(), args_.end());
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto child = util::spawn_child(argv, {.stdout_fd = log_fd, .stderr_fd = log_fd});
  if (log_fd >= 0) ::close(log_fd);
  if (!child) return std::unexpected(child.error());
  child_ = std::move(*child);
  const auto deadline = Clock::now() + millis(ready_timeout_s);
  while (Clock::now() < deadline) {
    if (const auto status = child_.wait(std::chrono::milliseconds(0))) {
      return std::unexpected("kvtierd exited at start-up (status " + std::to_string(*status) +
                             "); see " + log_path_);
    }
    if (ctl::RpcClient::connect(socket_)) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::unexpected("kvtierd did not accept connections in time; see " + log_path_);
}

void DaemonProcess::kill() { (void)child_.stop(std::chrono::milliseconds(0)); }

std::expected<void, std::string> DaemonProcess::restart(const std::string& log_path,
                                                        double ready_timeout_s) {
  kill();
  log_path_ = log_path;
  return spawn(ready_timeout_s);
}

bool DaemonProcess::stop(double timeout_s) {
  if (child_.pid() <= 0) return false;
  if (auto c = ctl::RpcClient::connect(socket_))
    (void)c->call("shutdown", nlohmann::json::object());
  if (const auto status = child_.wait(millis(timeout_s)))
    return WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  (void)child_.stop(std::chrono::milliseconds(0));
  return false;
}

DaemonProcess::~DaemonProcess() {
  (void)child_.stop(std::chrono::milliseconds(0));  // before its folder goes
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace kvtier::bench

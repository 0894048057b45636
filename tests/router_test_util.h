// kvtier-router for the black-box tests (router_test.cpp,
// router_faults_test.cpp): the real binary on a socket in a fresh temporary
// directory, in front of the daemons it is given, its stderr in a log file.
// Every wait is bounded; the process is killed and reaped with the object.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"

namespace kvtier::daemon_test {

class RouterProcess {
 public:
  // `extra_args` go after --socket, --model (the bundled model's, unless
  // they name one) and the daemons.
  explicit RouterProcess(const std::vector<std::string>& daemons,
                         const std::vector<std::string>& extra_args = {}) {
    socket_path_ = (dir_.path() / "router.sock").string();
    log_path_ = (dir_.path() / "router.log").string();
    std::vector<std::string> args = {KVTIER_ROUTER_PATH, "--socket", socket_path_};
    if (std::ranges::find(extra_args, "--model") == extra_args.end())
      args.insert(args.end(), {"--model", kModelDir.string()});
    for (const auto& d : daemons) args.insert(args.end(), {"--daemon", d});
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    auto child = util::spawn_child(args, {.stderr_fd = log_fd});
    if (log_fd >= 0) ::close(log_fd);
    if (child)
      child_ = std::move(*child);
    else
      ADD_FAILURE() << child.error();
  }

  std::unique_ptr<Client> connect() const { return std::make_unique<Client>(socket_path_); }
  const std::string& socket_path() const { return socket_path_; }
  const std::filesystem::path& dir() const { return dir_.path(); }
  std::string log() const { return test_util::read_file(log_path_); }
  pid_t pid() const { return child_.pid(); }
  // Its wait status once it has exited, waiting up to `timeout` for that
  // (zero: only looks); nullopt while it runs.
  std::optional<int> exit_status(std::chrono::milliseconds timeout = 0ms) {
    return child_.wait(timeout);
  }

  // The router's `fleet` answer; null when it did not give one.
  json fleet() const {
    Client c(socket_path_);
    if (!c.valid()) return json();
    auto r = c.call(request(1, "fleet"));
    return r && r->contains("result") ? (*r)["result"] : json();
  }

  // Polls fleet() until `ok` holds of daemon `i`'s entry and returns it;
  // nullopt on timeout.
  std::optional<json> poll(std::size_t i, const std::function<bool(const json&)>& ok) const {
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const json f = fleet();
      if (f.is_object() && f["daemons"].size() > i && ok(f["daemons"][i])) return f["daemons"][i];
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

  // poll(), failing the test (with the router's log) on timeout.
  json wait_for(std::size_t i, const std::function<bool(const json&)>& ok) const {
    auto d = poll(i, ok);
    if (!d) ADD_FAILURE() << "timed out waiting on daemon " << i << "\n" << log();
    return d.value_or(json());
  }

  bool wait_usable(std::size_t i, bool usable) const {
    return poll(i, [usable](const json& d) { return d["usable"] == usable; }).has_value();
  }

 private:
  test_util::TempDir dir_;
  std::string socket_path_, log_path_;
  util::ChildProcess child_;
};

}  // namespace kvtier::daemon_test

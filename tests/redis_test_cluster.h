// A real Redis Cluster for a test: three masters (no replicas) on loopback
// ports, each a RedisServer (redis_server.h) with cluster support on, made
// one cluster by `redis-cli --cluster create` as an operator would. It keeps
// serving the slots of the masters that are up when one is down
// (cluster-require-full-coverage no, as docs/fleet.md advises), and a
// master stopped and started again rejoins with its slots (its nodes.conf
// stays), empty. Tests skip with missing()'s reason where redis-server or
// redis-cli is not installed.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redis_server.h"

#define SKIP_WITHOUT_REDIS_CLUSTER() \
  if (auto why = ::kvtier::test_util::RedisTestCluster::missing()) GTEST_SKIP() << *why

namespace kvtier::test_util {

class RedisTestCluster {
 public:
  static std::optional<std::string> missing() {
    if (auto why = RedisServer::missing()) return why;
    if (::access(kRedisCli, X_OK) != 0)
      return std::string(kRedisCli) + " is not installed (scripts/install-deps.sh installs it)";
    return std::nullopt;
  }

  explicit RedisTestCluster(int masters = 3) {
    if (missing()) return;
    std::vector<std::string> create = {kRedisCli, "--cluster", "create"};
    for (int i = 0; i < masters; ++i) {
      nodes_.push_back(std::make_unique<RedisServer>(
          true, "",
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-port",
                                   std::to_string(RedisServer::free_port()),
                                   "--cluster-node-timeout", "2000",
                                   "--cluster-require-full-coverage", "no"}));
      if (!nodes_.back()->ready()) return;
      create.push_back("127.0.0.1:" + std::to_string(nodes_.back()->port()));
    }
    create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
    if (run(create) != 0) return;
    // Created once every node says so (the nodes learn of each other by
    // gossip, in well under a second on loopback).
    ready_ = true;
    for (int i = 0; i < masters; ++i) ready_ = ready_ && wait_state_ok(i);
  }

  bool ready() const { return ready_; }
  std::string log() const {
    std::string out = create_log_;
    for (const auto& node : nodes_) out += "\n--- " + node->dir().string() + "\n" + node->log();
    return out;
  }
  int size() const { return static_cast<int>(nodes_.size()); }
  RedisServer& node(int i) { return *nodes_[static_cast<std::size_t>(i)]; }
  std::vector<tiers::RedisAddress> seeds() const {
    std::vector<tiers::RedisAddress> out;
    for (const auto& node : nodes_) out.push_back(node->tcp_address());
    return out;
  }
  // The node that serves `key` now (the one that does not answer MOVED),
  // or -1.
  int owner_of(const std::string& key) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->ready() && !nodes_[i]->command({"GET", key}).is_error())
        return static_cast<int>(i);
    return -1;
  }
  std::string id(int i) const {
    return nodes_[static_cast<std::size_t>(i)]->command({"CLUSTER", "MYID"}).str;
  }
  // Whether node i says the cluster is in state ok, within 20 s (a master
  // started again takes a few gossip rounds to rejoin).
  bool wait_state_ok(int i) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!state_ok(i) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return state_ok(i);
  }

 private:
  static constexpr const char* kRedisCli = "/usr/bin/redis-cli";

  // Runs a command with its output in create_log_ (and why it could not
  // start); its exit status, or -1. Killed past a minute: it takes seconds.
  int run(const std::vector<std::string>& args) {
    const std::filesystem::path out = nodes_.front()->dir() / "create.log";
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const auto ran =
        util::run_child(args, {.stdout_fd = fd, .stderr_fd = fd}, std::chrono::minutes(1));
    if (fd >= 0) ::close(fd);
    create_log_ = read_file(out);
    if (!ran) create_log_ += ran.error();
    return ran && WIFEXITED(ran->status) ? WEXITSTATUS(ran->status) : -1;
  }

  bool state_ok(int i) const {
    const tiers::RedisReply info =
        nodes_[static_cast<std::size_t>(i)]->command({"CLUSTER", "INFO"});
    return info.str.find("cluster_state:ok") != std::string::npos;
  }

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::string create_log_;
  bool ready_ = false;
};

}  // namespace kvtier::test_util

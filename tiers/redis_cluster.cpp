#include "tiers/redis_cluster.h"

#include <algorithm>

namespace kvtier::tiers {

namespace {

// A command is redirected at most this many times in one round; past it,
// the last redirection is its reply (an error: the node is told so).
constexpr int kMaxRedirects = 5;

const RedisConnection::Command kAsking = {"ASKING"};

}  // namespace

RedisCluster::RedisCluster(bool cluster, const RedisNodeOptions& options)
    : cluster_(cluster), options_(options) {}

std::expected<std::unique_ptr<RedisCluster>, std::string> RedisCluster::open(
    const std::vector<RedisAddress>& seeds, const RedisNodeOptions& options) {
  if (seeds.empty()) return std::unexpected("no Redis address");
  std::string whys;
  for (const RedisAddress& seed : seeds) {
    auto connection = RedisConnection::connect(seed, options.timeout, options.password);
    std::expected<std::vector<RedisReply>, std::string> replies = std::unexpected(std::string());
    if (connection) {
      const std::vector<RedisConnection::Command> ask = {{"CLUSTER", "SLOTS"}, {"CLUSTER", "INFO"}};
      replies = (*connection)->round(ask, options.timeout);
    } else {
      replies = std::unexpected(connection.error());
    }
    if (!replies) {
      whys += (whys.empty() ? "" : "; ") + replies.error();
      continue;
    }
    const RedisReply& slots = (*replies)[0];
    if (slots.is_error() && slots.str.find("cluster support disabled") != std::string::npos) {
      if (seeds.size() > 1)
        return std::unexpected(seed.to_string() +
                               " is a single Redis server (cluster support disabled), not a "
                               "cluster node: give it as the only address");
      std::unique_ptr<RedisCluster> single(new RedisCluster(false, options));
      single->node_at(seed);
      return single;
    }
    auto ranges = parse_cluster_slots(slots, seed);
    if (!ranges) return std::unexpected(ranges.error());
    const RedisReply& info = (*replies)[1];
    if (ranges->empty())
      return std::unexpected(seed.to_string() +
                             ": the cluster serves no slots (is it created? redis-cli --cluster "
                             "create)");
    if (info.kind != RedisReply::Kind::kString ||
        info.str.find("cluster_state:ok") == std::string::npos)
      return std::unexpected(seed.to_string() +
                             ": the cluster is not in state ok (it answers CLUSTERDOWN)");
    std::unique_ptr<RedisCluster> cluster(new RedisCluster(true, options));
    std::lock_guard lock(cluster->mu_);  // nobody else has it yet; node_at takes none
    cluster->take_map_locked(*ranges);
    return cluster;
  }
  return std::unexpected(whys);
}

RedisNode* RedisCluster::node_at(const RedisAddress& address) {
  std::lock_guard lock(mu_);
  return node_at_locked(address);
}

RedisNode* RedisCluster::node_at_locked(const RedisAddress& address) {
  for (const auto& node : nodes_)
    if (node->address() == address) return node.get();
  if (nodes_.size() >= kMaxNodes) return nullptr;
  nodes_.push_back(std::make_unique<RedisNode>(address, options_));
  return nodes_.back().get();
}

void RedisCluster::take_map_locked(const std::vector<SlotRange>& ranges) {
  owner_.fill(nullptr);
  for (const SlotRange& range : ranges) {
    RedisNode* node = node_at_locked(range.master);
    for (int slot = range.first; slot <= range.last; ++slot) owner_[slot] = node;
  }
}

std::vector<RedisCluster::Answer> RedisCluster::round(
    std::span<const RedisConnection::Command> commands, const ValueSink& sink) {
  std::vector<Answer> answers(commands.size(),
                              Answer{std::unexpected(RedisNode::RoundError::kRefused), nullptr});
  std::vector<RedisNode*> target(commands.size());
  std::vector<bool> asking(commands.size(), false);
  std::vector<std::size_t> pending;
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < commands.size(); ++i) {
      target[i] = cluster_ ? owner_[redis_key_slot(commands[i].at(1))] : nodes_.front().get();
      if (target[i] != nullptr) pending.push_back(i);
    }
  }
  bool refresh = false;
  for (int pass = 0; !pending.empty(); ++pass) {
    std::vector<RedisNode*> nodes;  // this pass's, in order of first use
    for (std::size_t i : pending)
      if (std::ranges::find(nodes, target[i]) == nodes.end()) nodes.push_back(target[i]);
    std::vector<std::size_t> next;
    for (RedisNode* node : nodes) {
      std::vector<RedisConnection::Command> share;
      std::vector<std::size_t> mine;
      std::vector<std::size_t> index_of;  // each of share's commands' in `commands`
      for (std::size_t i : pending) {
        if (target[i] != node) continue;
        if (asking[i]) {
          share.push_back(kAsking);
          index_of.push_back(commands.size());  // ASKING's own: not offered
        }
        share.push_back(commands[i]);
        index_of.push_back(i);
        mine.push_back(i);
      }
      ValueSink offer;
      if (sink)
        offer = [&](std::size_t c, std::span<const std::byte> value) {
          return index_of[c] < commands.size() && sink(index_of[c], value);
        };
      auto replies = node->round(share, offer);
      if (!replies) {
        for (std::size_t i : mine) answers[i] = {std::unexpected(replies.error()), node};
        refresh = refresh || replies.error() == RedisNode::RoundError::kFailed;
        continue;
      }
      std::size_t r = 0;
      for (std::size_t i : mine) {
        if (asking[i]) ++r;  // ASKING's +OK
        RedisReply& reply = (*replies)[r++];
        const auto redirect = cluster_ && pass < kMaxRedirects
                                  ? parse_redirect(reply, node->address())
                                  : std::nullopt;
        RedisNode* to = redirect ? node_at(redirect->to) : nullptr;
        if (to == nullptr) {
          answers[i] = {std::move(reply), node};
          continue;
        }
        target[i] = to;
        asking[i] = redirect->ask;
        if (!redirect->ask) {
          std::lock_guard lock(mu_);
          owner_[redirect->slot] = to;
          refresh = true;
        }
        next.push_back(i);
      }
    }
    pending = std::move(next);
  }
  if (refresh && cluster_) refresh_soon();
  return answers;
}

void RedisCluster::refresh_soon() {
  const auto t = options_.clock ? options_.clock() : std::chrono::steady_clock::now();
  if (last_refresh_ != std::chrono::steady_clock::time_point{} &&
      t - last_refresh_ < options_.backoff_initial)
    return;
  last_refresh_ = t;
  std::vector<RedisNode*> nodes;
  {
    std::lock_guard lock(mu_);
    for (const auto& node : nodes_) nodes.push_back(node.get());
  }
  const RedisConnection::Command ask = {"CLUSTER", "SLOTS"};
  for (RedisNode* node : nodes) {
    if (!node->accepting()) continue;
    auto replies = node->round(std::span(&ask, 1));
    if (!replies) continue;
    auto ranges = parse_cluster_slots((*replies)[0], node->address());
    if (!ranges || ranges->empty()) continue;  // not a map to route by: ask another
    std::lock_guard lock(mu_);
    take_map_locked(*ranges);
    return;
  }
}

void RedisCluster::probe_due_nodes() {
  std::vector<RedisNode*> due;
  {
    std::lock_guard lock(mu_);
    for (const auto& node : nodes_)
      if (node->probe_due() && node->accepting()) due.push_back(node.get());
  }
  for (RedisNode* node : due) node->probe();
}

bool RedisCluster::probe_due() const {
  std::lock_guard lock(mu_);
  return std::ranges::any_of(nodes_,
                             [](const auto& node) { return node->probe_due().has_value(); });
}

bool RedisCluster::accepting() const {
  std::lock_guard lock(mu_);
  return std::ranges::any_of(nodes_, [](const auto& node) { return node->accepting(); });
}

std::vector<NodeHealth> RedisCluster::health() const {
  std::lock_guard lock(mu_);
  std::vector<NodeHealth> out;
  for (const auto& node : nodes_) out.push_back(node->health());
  return out;
}

}  // namespace kvtier::tiers

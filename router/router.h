// The fleet as the router's sessions see it: the daemons (one DaemonLink
// each), the model they must share, the tokenizer that turns a text prompt
// into the ids whose block keys are matched, the choice of a daemon per
// request, and the router-wide request ids clients cancel by.
//
// A prompt's keys are the daemons' own: root_key(fingerprint, cache_salt)
// chained over its full blocks, as many as admission would match
// ((tokens - 1) / page_size), engine/cache/block_hash.h. Until a daemon has
// told the fingerprint (or with no daemon caching prefixes) there are no
// keys, and every request is routed cold.
//
// Request ids: the router hands out its own (each daemon numbers its
// requests from 1, so theirs collide across a fleet); a session rewrites
// them in the daemons' answers and maps them back for `cancel`.
//
// Thread-safety: everything on the router's io thread.
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/tokenizer.h"
#include "router/daemon_link.h"
#include "router/route_choice.h"
#include "wire/access.h"
#include "wire/chat_template.h"

namespace kvtier::router {

class ClientSession;

struct Route {
  int daemon = -1;
  Reason reason = Reason::kCold;
  PrefixMatch match;  // what the chosen daemon holds of the prompt
  // Rows it has to prefill there, as its backlog counts them until the
  // first token: DaemonLink::started(rows) then, or when it leaves unstarted.
  int rows = 0;
};

class Router {
 public:
  // `daemons`: where they listen, at least one. `config`: the router's
  // --model, with the tokenizer it names and its chat format, which render
  // a request as the daemons do, so that its blocks get their keys.
  Router(asio::io_context& io, std::vector<DaemonAddress> daemons, ModelConfig config,
         std::unique_ptr<Tokenizer> tokenizer, wire::ChatTemplate chat_template);
  Router(const Router&) = delete;  // its links call back into it
  Router& operator=(const Router&) = delete;

  void start();
  void stop();

  // The router is stopping (RouterServer's drain): sessions refuse new
  // requests (kShuttingDown, HTTP 503) while those in flight finish, and
  // `health` says "draining".
  void drain() { draining_ = true; }
  bool draining() const { return draining_; }
  // Requests the router has on daemons now, over every link.
  int in_flight() const;

  // What `shutdown` calls: the server stops (set by it).
  std::function<void()> on_shutdown;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const wire::ChatTemplate& chat_template() const { return chat_template_; }
  const ModelConfig& model() const { return fleet_.config; }
  int daemons() const { return static_cast<int>(links_.size()); }
  DaemonLink& link(int i) { return *links_[i]; }

  // The daemon for a prompt, among the usable ones not in `excluded`
  // (indices); nullopt when there is none. Counts the choice.
  std::optional<Route> route(std::span<const int> tokens, std::string_view cache_salt,
                             std::span<const int> excluded = {});

  // Where a prompt would go now and why, counting nothing: the chosen
  // daemon and reason (null when none is usable), and for every usable
  // daemon its expected microseconds, the blocks of the prompt it holds by
  // tier and its load. The `fleet.route` method.
  nlohmann::json explain(std::span<const int> tokens, std::string_view cache_salt) const;

  // A request sent again because its daemon went away before answering.
  void count_retry() { ++retried_; }

  // The cached tokens a daemon's `generate` answer reports, by tier.
  void count_cached(const nlohmann::json& cached_tokens);

  // Router-wide request ids, and which session and owner each belongs to.
  std::uint64_t request_begin(std::weak_ptr<ClientSession> session, wire::RequestOwner owner);
  void request_end(std::uint64_t id);
  struct Owned {
    std::weak_ptr<ClientSession> session;
    wire::RequestOwner owner;
  };
  const Owned* request(std::uint64_t id) const;

  // `health`: ok while some daemon is usable (unavailable otherwise,
  // draining once stopping), with the first usable one's model and
  // config, and the fleet.
  nlohmann::json health() const;
  // `fleet` (and the page's GET /fleet): every daemon, the choices by
  // reason, the cached tokens by tier, and the last kRecentRoutes choices,
  // newest first: the daemon, why, the prompt's tokens and the blocks of it
  // the daemon held, by tier.
  nlohmann::json fleet() const;
  static constexpr std::size_t kRecentRoutes = 16;

 private:
  // The candidates for a prompt and the choice among them. The candidates
  // point into weighed_, so a plan is used at once, before the io thread
  // runs anything that could change it.
  struct Plan {
    std::vector<Candidate> candidates;
    std::vector<int> daemons;  // each candidate's daemon index
    int prompt_tokens = 0, page_size = 1;
    std::optional<Choice> choice;
  };
  Plan plan(std::span<const int> tokens, std::string_view cache_salt,
            std::span<const int> excluded) const;
  // Fills weighed_ again: called whenever a link's costs, kind or
  // usability change (every kCostsInterval a daemon), not per request.
  void weigh();

  // Each daemon's figures as the choice weighs them: its own, with its
  // kind's curve (route_choice.h), the median over the usable daemons of
  // the kind.
  std::vector<CostFigures> weighed_;

  FleetModel fleet_;
  std::unique_ptr<Tokenizer> tokenizer_;
  wire::ChatTemplate chat_template_;
  std::vector<std::unique_ptr<DaemonLink>> links_;
  std::unordered_map<std::uint64_t, Owned> requests_;
  std::uint64_t next_request_id_ = 1;
  std::uint64_t choices_[3] = {};
  std::deque<nlohmann::json> recent_routes_;  // newest first, at most kRecentRoutes
  std::uint64_t unrouted_ = 0;                // no daemon was usable
  std::uint64_t retried_ = 0;
  bool draining_ = false;
  PerTier<std::uint64_t> routed_blocks_;  // blocks the chosen daemon held, by tier
  PerTier<std::uint64_t> cached_tokens_;  // as the daemons' answers report them
};

}  // namespace kvtier::router

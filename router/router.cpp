#include "router/router.h"

#include <xxhash.h>

#include <algorithm>
#include <map>

#include "engine/cache/block_hash.h"

namespace kvtier::router {

using nlohmann::json;

Router::Router(asio::io_context& io, std::vector<DaemonAddress> daemons, ModelConfig config,
               std::unique_ptr<Tokenizer> tokenizer, wire::ChatTemplate chat_template)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {
  fleet_.config = std::move(config);
  for (auto& address : daemons) {
    links_.push_back(std::make_unique<DaemonLink>(io, std::move(address), fleet_));
    links_.back()->on_weighed_change = [this] { weigh(); };
  }
  weighed_.resize(links_.size());
}

void Router::weigh() {
  std::map<std::string_view, std::vector<std::pair<int, double>>> curves;
  for (const auto& link : links_) {
    if (!link->usable() || curves.contains(link->kind())) continue;
    std::vector<const CostFigures*> kind;
    for (const auto& other : links_)
      if (other->usable() && other->kind() == link->kind()) kind.push_back(&other->costs());
    curves.emplace(link->kind(), median_curve(kind));
  }
  for (std::size_t i = 0; i < links_.size(); ++i) {
    weighed_[i] = links_[i]->costs();
    if (const auto curve = curves.find(links_[i]->kind()); curve != curves.end())
      weighed_[i].prefill = curve->second;
  }
}

void Router::start() {
  for (auto& link : links_) link->start();
}

void Router::stop() {
  for (auto& link : links_) link->stop();
}

int Router::in_flight() const {
  int n = 0;
  for (const auto& link : links_) n += link->in_flight();
  return n;
}

Router::Plan Router::plan(std::span<const int> tokens, std::string_view cache_salt,
                          std::span<const int> excluded) const {
  std::vector<tiers::BlockKey> keys;
  const int page = fleet_.page_size;
  if (page > 0 && fleet_.fingerprint && !tokens.empty())  // the last token is always prefilled
    keys = chain_keys(root_key(*fleet_.fingerprint, cache_salt), tokens.first(tokens.size() - 1),
                      page);
  Plan p;
  for (int i = 0; i < daemons(); ++i) {
    const DaemonLink& link = *links_[i];
    if (!link.usable() || std::find(excluded.begin(), excluded.end(), i) != excluded.end())
      continue;
    p.daemons.push_back(i);
  }
  for (int i : p.daemons)
    p.candidates.push_back(
        {links_[i]->index().match(keys), links_[i]->backlog_rows(), &weighed_[i], 0});
  // The prompt's affinity, for ties: its first page that no candidate
  // holds (route_choice.h says why).
  int held = 0;
  for (const Candidate& c : p.candidates) held = std::max(held, c.match.blocks);
  std::uint64_t affinity = XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), 0);
  if (page > 0) {
    const auto from = std::min(tokens.size(), static_cast<std::size_t>(held) * page);
    const auto part = tokens.subspan(from, std::min<std::size_t>(page, tokens.size() - from));
    affinity = XXH3_64bits_withSeed(part.data(), part.size_bytes(), affinity);
  }
  for (std::size_t c = 0; c < p.candidates.size(); ++c)
    p.candidates[c].rendezvous = rendezvous_score(affinity, links_[p.daemons[c]]->address());
  p.prompt_tokens = static_cast<int>(tokens.size());
  p.page_size = std::max(page, 1);
  p.choice = choose(p.candidates, p.prompt_tokens, p.page_size);
  return p;
}

std::optional<Route> Router::route(std::span<const int> tokens, std::string_view cache_salt,
                                   std::span<const int> excluded) {
  const Plan p = plan(tokens, cache_salt, excluded);
  if (!p.choice) {
    ++unrouted_;
    return std::nullopt;
  }
  ++choices_[static_cast<int>(p.choice->reason)];
  const PrefixMatch& match = p.candidates[p.choice->index].match;
  for (int t = 0; t < kNumTiers; ++t) routed_blocks_[t] += match.by_tier[t];
  const int daemon = p.daemons[p.choice->index];
  const int rows = std::max(0, p.prompt_tokens - match.blocks * p.page_size);
  links_[daemon]->routed(rows);
  json held = json::object();
  for (int t = 0; t < kNumTiers; ++t) held[kTierNames[t].name] = match.by_tier[t];
  recent_routes_.push_front({{"daemon", links_[daemon]->address()},
                             {"reason", to_string(p.choice->reason)},
                             {"prompt_tokens", p.prompt_tokens},
                             {"held_blocks", std::move(held)}});
  if (recent_routes_.size() > kRecentRoutes) recent_routes_.pop_back();
  return Route{daemon, p.choice->reason, match, rows};
}

json Router::explain(std::span<const int> tokens, std::string_view cache_salt) const {
  const Plan p = plan(tokens, cache_salt, {});
  json daemons = json::array();
  for (std::size_t c = 0; c < p.candidates.size(); ++c) {
    const Candidate& cand = p.candidates[c];
    json held = json::object();
    for (int t = 0; t < kNumTiers; ++t) held[kTierNames[t].name] = cand.match.by_tier[t];
    daemons.push_back({{"address", links_[p.daemons[c]]->address()},
                       {"expected_us", expected_us(cand, p.prompt_tokens, p.page_size)},
                       {"held_blocks", held},
                       {"pending", links_[p.daemons[c]]->pending()},
                       {"backlog_rows", cand.backlog_rows}});
  }
  json out = {{"daemon", nullptr}, {"reason", nullptr}, {"daemons", daemons}};
  if (p.choice) {
    out["daemon"] = links_[p.daemons[p.choice->index]]->address();
    out["reason"] = to_string(p.choice->reason);
  }
  return out;
}

void Router::count_cached(const json& cached_tokens) {
  if (!cached_tokens.is_object()) return;
  for (int t = 0; t < kNumTiers; ++t) {
    const auto it = cached_tokens.find(kTierNames[t].name);
    if (it != cached_tokens.end() && it->is_number_unsigned())
      cached_tokens_[t] += it->get<std::uint64_t>();
  }
}

std::uint64_t Router::request_begin(std::weak_ptr<ClientSession> session,
                                    wire::RequestOwner owner) {
  const std::uint64_t id = next_request_id_++;
  requests_.emplace(id, Owned{std::move(session), owner});
  return id;
}

void Router::request_end(std::uint64_t id) { requests_.erase(id); }

const Router::Owned* Router::request(std::uint64_t id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

json Router::health() const {
  json daemons = json::array();
  const DaemonLink* first = nullptr;
  int usable = 0;
  for (const auto& link : links_) {
    daemons.push_back({{"address", link->address()}, {"usable", link->usable()}});
    if (!link->usable()) continue;
    ++usable;
    if (!first) first = link.get();
  }
  json h = first ? first->health() : json::object();
  h["status"] = draining_ ? "draining" : first ? "ok" : "unavailable";
  h["router"] = {{"daemons", daemons}, {"usable", usable}};
  return h;
}

json Router::fleet() const {
  json daemons = json::array();
  for (const auto& link : links_) daemons.push_back(link->describe());
  json choices = json::object();
  for (int r = 0; r < 3; ++r) choices[kReasonNames[r]] = choices_[r];
  choices["unrouted"] = unrouted_;
  choices["retried"] = retried_;
  json routed = json::object(), cached = json::object();
  for (int t = 0; t < kNumTiers; ++t) {
    routed[kTierNames[t].name] = routed_blocks_[t];
    cached[kTierNames[t].name] = cached_tokens_[t];
  }
  return {{"daemons", daemons},
          {"page_size", fleet_.page_size},
          {"choices", choices},
          {"routed_blocks", routed},
          {"cached_tokens", cached},
          {"requests", requests_.size()},
          {"recent", json(recent_routes_)}};
}

}  // namespace kvtier::router

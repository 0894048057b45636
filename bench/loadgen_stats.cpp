#include "bench/loadgen_stats.h"

#include <initializer_list>

namespace kvtier::bench {

using nlohmann::json;

namespace {

long first_number(const json& j, std::initializer_list<const char*> names, long fallback) {
  if (!j.is_object()) return fallback;
  for (const char* n : names)
    if (auto it = j.find(n); it != j.end() && it->is_number()) return it->get<long>();
  return fallback;
}

// The object describing tier t (0 = L1) inside `cache`, or null.
const json* tier_object(const json& cache, int t) {
  const char* name = kTierNames[t].name;
  if (auto it = cache.find(name); it != cache.end() && it->is_object()) return &*it;
  if (auto it = cache.find(kTierNames[t].label); it != cache.end() && it->is_object()) return &*it;
  for (const char* list : {"tiers", "tier"}) {
    auto it = cache.find(list);
    if (it == cache.end()) continue;
    if (it->is_object()) {
      if (auto n = it->find(name); n != it->end() && n->is_object()) return &*n;
    } else if (it->is_array()) {
      for (const json& e : *it)  // named entries first
        if (e.is_object() && (e.value("name", "") == name || e.value("tier", "") == name))
          return &e;
      if (t < static_cast<int>(it->size()) && (*it)[t].is_object()) return &(*it)[t];
    }
  }
  return nullptr;
}

// Adds b's numbers into a where both have one at the same place.
void add_numbers(json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float())
      a = a.get<double>() + b.get<double>();
    else
      a = a.get<long>() + b.get<long>();
  } else if (a.is_object() && b.is_object()) {
    for (auto& [key, value] : a.items())
      if (auto it = b.find(key); it != b.end()) add_numbers(value, *it);
  }
}

}  // namespace

json sum_stats(const std::vector<json>& each) {
  if (each.empty()) return nullptr;
  json sum = each.front();
  for (std::size_t i = 1; i < each.size(); ++i) add_numbers(sum, each[i]);
  return sum;
}

long StatsView::hit_blocks() const {
  long n = 0;
  for (const TierFigures& t : tier) n += t.hits;
  return n;
}

double StatsView::hit_rate(int t) const {
  if (!has_cache) return -1;
  const long looked = hit_blocks() + missed_blocks;
  return looked > 0 ? static_cast<double>(tier[t].hits) / looked : 0.0;
}

StatsView view_stats(const json& s) {
  StatsView v;
  if (!s.is_object()) return v;
  v.waiting = first_number(s, {"waiting"}, 0);
  v.running = first_number(s, {"running"}, 0);
  v.pending = first_number(s, {"pending"}, 0);
  v.blocks_used = first_number(s, {"blocks_used"}, -1);
  v.blocks_free = first_number(s, {"blocks_free"}, -1);
  v.preemptions = first_number(s, {"preemptions"}, 0);
  v.recomputed_tokens = first_number(s, {"recomputed_tokens"}, 0);
  v.swapped_out = first_number(s, {"swapped_out"}, 0);
  v.submitted = first_number(s, {"requests_submitted"}, 0);
  v.completed = first_number(s, {"requests_completed"}, 0);
  v.cancelled = first_number(s, {"requests_cancelled"}, 0);
  v.failed = first_number(s, {"requests_failed"}, 0);
  v.tokens_generated = first_number(s, {"tokens_generated"}, 0);
  auto cache = s.find("cache");
  if (cache == s.end() || !cache->is_object()) return v;
  v.has_cache = true;
  v.missed_blocks = first_number(*cache, {"missed_blocks", "misses", "miss_blocks"}, 0);
  v.cache_nodes = first_number(*cache, {"nodes"}, -1);
  for (int t = 0; t < kNumTiers; ++t) {
    const json* o = tier_object(*cache, t);
    if (!o) continue;
    TierFigures& f = v.tier[t];
    f.present = true;
    f.used = first_number(*o, {"used_blocks", "blocks_used", "used"}, -1);
    f.capacity = first_number(*o, {"capacity_blocks", "blocks_capacity", "capacity"}, -1);
    f.hits = first_number(*o, {"hits", "hit_blocks"}, 0);
    f.demotions = first_number(*o, {"demotions", "demoted"}, 0);
    f.promotions = first_number(*o, {"promotions", "promoted"}, 0);
    f.dropped = first_number(*o, {"dropped", "evictions"}, 0);
  }
  return v;
}

StatsView stats_delta(const StatsView& a, const StatsView& b) {
  StatsView d = b;
  d.preemptions -= a.preemptions;
  d.recomputed_tokens -= a.recomputed_tokens;
  d.swapped_out -= a.swapped_out;
  d.submitted -= a.submitted;
  d.completed -= a.completed;
  d.cancelled -= a.cancelled;
  d.failed -= a.failed;
  d.tokens_generated -= a.tokens_generated;
  d.missed_blocks -= a.missed_blocks;
  for (int t = 0; t < kNumTiers; ++t) {
    d.tier[t].hits -= a.tier[t].hits;
    d.tier[t].demotions -= a.tier[t].demotions;
    d.tier[t].promotions -= a.tier[t].promotions;
    d.tier[t].dropped -= a.tier[t].dropped;
  }
  return d;
}

}  // namespace kvtier::bench

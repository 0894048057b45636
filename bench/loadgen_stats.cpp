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
  static const char* names[3] = {"l1", "l2", "l3"};
  static const char* upper[3] = {"L1", "L2", "L3"};
  if (auto it = cache.find(names[t]); it != cache.end() && it->is_object()) return &*it;
  if (auto it = cache.find(upper[t]); it != cache.end() && it->is_object()) return &*it;
  for (const char* list : {"tiers", "tier"}) {
    auto it = cache.find(list);
    if (it == cache.end()) continue;
    if (it->is_object()) {
      if (auto n = it->find(names[t]); n != it->end() && n->is_object()) return &*n;
    } else if (it->is_array()) {
      for (const json& e : *it)  // named entries first
        if (e.is_object() && (e.value("name", "") == names[t] || e.value("tier", "") == names[t]))
          return &e;
      if (t < static_cast<int>(it->size()) && (*it)[t].is_object()) return &(*it)[t];
    }
  }
  return nullptr;
}

}  // namespace

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
  for (int t = 0; t < 3; ++t) {
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
  for (int t = 0; t < 3; ++t) {
    d.tier[t].hits -= a.tier[t].hits;
    d.tier[t].demotions -= a.tier[t].demotions;
    d.tier[t].promotions -= a.tier[t].promotions;
    d.tier[t].dropped -= a.tier[t].dropped;
  }
  return d;
}

}  // namespace kvtier::bench

#include "engine/model/kv_evictor.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <utility>

#include "util/random.h"

namespace kvtier {
namespace {

// The random anchor's seed: one pattern for every request and every run.
constexpr std::uint64_t kRandomAnchorSeed = 2;

int pages_for(long positions, int page_size) {
  return static_cast<int>((positions + page_size - 1) / page_size);
}

// First page index holding any of the last `n` of `length` positions.
int first_page_of_last(int length, int n, int page_size) {
  return std::max(0, length - n) / page_size;
}

// Pages of the table a window policy keeps at `length`: those holding any of
// the first `sinks` or the last `window` positions.
bool window_keeps(const EvictionPolicy& p, int page, int length, int page_size) {
  return page < pages_for(p.sinks, page_size) ||
         page >= first_page_of_last(length, p.window, page_size);
}

// KVCrush (see the header): the `budget` pages of `eligible` it keeps, from
// the bits of every position of `area` (the evictable pages).
template <typename ScoreOf>
std::vector<int> kvcrush_keep(const EvictionPolicy& policy, const std::vector<int>& area,
                              const std::vector<int>& eligible, int budget, int page_size,
                              const ScoreOf& score_of) {
  const int P = page_size, E = static_cast<int>(area.size());
  // A bit per position: 1 for the better-scored half (ties to the older).
  std::vector<std::pair<long double, int>> ranked;  // (-score, position)
  for (int page : area)
    for (int t = page * P; t < (page + 1) * P; ++t) ranked.push_back({-score_of(t), t});
  std::sort(ranked.begin(), ranked.end());
  std::vector<char> bit(static_cast<std::size_t>(std::ranges::max(area) + 1) * P, 0);
  for (std::size_t i = 0; i < ranked.size() / 2; ++i) bit[ranked[i].second] = 1;

  std::vector<char> anchor(P, 0);
  switch (policy.kvcrush_anchor) {
    case KvCrushAnchor::kZeros:
      break;
    case KvCrushAnchor::kOnes:
      std::fill(anchor.begin(), anchor.end(), 1);
      break;
    case KvCrushAnchor::kAlternate:
      for (int j = 0; j < P; ++j) anchor[j] = static_cast<char>(j % 2);
      break;
    case KvCrushAnchor::kMean:
      for (int j = 0; j < P; ++j) {
        int ones = 0;
        for (int page : area) ones += bit[page * P + j];
        anchor[j] = 2 * ones > E ? 1 : 0;
      }
      break;
    case KvCrushAnchor::kRandom: {
      util::Xoshiro256StarStar rng(kRandomAnchorSeed);
      for (int j = 0; j < P; ++j) anchor[j] = static_cast<char>(rng.next() >> 63);
      break;
    }
  }
  // (Hamming distance to the anchor, page): ties to the older page.
  std::vector<std::pair<int, int>> ranked_pages;
  for (int page : eligible) {
    int d = 0;
    for (int j = 0; j < P; ++j) d += bit[page * P + j] != anchor[j] ? 1 : 0;
    ranked_pages.push_back({d, page});
  }
  std::ranges::sort(ranked_pages);
  // Evenly spaced ranks: the kept pages span the distances.
  const int step = static_cast<int>(ranked_pages.size()) / budget;
  std::vector<int> keep;
  for (int i = 0; i < budget; ++i)
    keep.push_back(ranked_pages[static_cast<std::size_t>(i) * step].second);
  return keep;
}

}  // namespace

int effective_kv_tokens(const EvictionPolicy& policy, int prompt, int positions, int page_size) {
  assert(1 <= prompt && prompt <= positions);
  const int P = page_size;
  if (policy.kind == EvictionKind::kNone) return pages_for(positions, P) * P;
  // The prefill holds every prompt page; then the forward that writes
  // position L (L = prompt .. positions - 1) holds what eviction kept at
  // length L plus the page of L.
  int peak = pages_for(prompt, P);
  for (int L = prompt; L < positions; ++L) {
    const int write_page = L / P;
    int held = 0;
    if (policy.kind == EvictionKind::kWindow) {
      for (int page = 0; page < pages_for(L, P); ++page)
        held += window_keeps(policy, page, L, P) ? 1 : 0;
    } else {
      // H2O evicts down to max_size / P exactly, and only when above it
      // (validate() leaves enough evictable pages).
      held = std::min(pages_for(L, P), policy.max_size / P);
    }
    if (write_page == pages_for(L, P)) ++held;  // a fresh page for position L
    peak = std::max(peak, held);
  }
  return peak * P;
}

std::vector<int> pages_to_evict(const EvictionPolicy& policy, const SequenceKv& kv,
                                std::span<const kernels::AttentionScore> scores, int scores_from) {
  const int P = kv.page_size(), L = kv.length();
  const int full_pages = L / P;  // only these can go
  std::vector<int> evict;
  switch (policy.kind) {
    case EvictionKind::kNone:
      break;
    case EvictionKind::kWindow:
      for (int page = 0; page < full_pages; ++page)
        if (!kv.is_evicted(page) && !window_keeps(policy, page, L, P)) evict.push_back(page);
      break;
    case EvictionKind::kH2o: {
      const int excess = kv.resident_blocks() - policy.max_size / P;
      if (excess <= 0) break;
      assert(static_cast<int>(scores.size()) >= L);
      auto score_of = [&](int t) {
        return policy.aggregation == ScoreAggregation::kSum
                   ? static_cast<long double>(scores[t])
                   // the queries that saw t and scored
                   : static_cast<long double>(scores[t]) / (L - std::max(t, scores_from));
      };
      // The evictable area: resident full pages after the start area and
      // before the recent one, each with its score.
      const int recent_first = first_page_of_last(L, policy.recent, P);
      std::vector<std::pair<long double, int>> candidates;
      for (int page = policy.start / P; page < std::min(full_pages, recent_first); ++page) {
        if (kv.is_evicted(page)) continue;
        long double score = 0.0L;
        for (int t = page * P; t < (page + 1) * P; ++t) score += score_of(t);
        candidates.push_back({score, page});
      }
      // Lowest score first; ties go to the older page.
      std::sort(candidates.begin(), candidates.end());
      const int n = std::min(excess, static_cast<int>(candidates.size()));
      const int kept = static_cast<int>(candidates.size()) - n;
      const int crush = std::min(policy.kvcrush_budget, kept);
      if (crush == 0) {
        for (int i = 0; i < n; ++i) evict.push_back(candidates[i].second);
      } else {
        // The best-scored pages but `crush` stay; the rest are KVCrush's.
        std::vector<int> area, eligible;
        for (const auto& c : candidates) area.push_back(c.second);
        for (int i = 0; i < n + crush; ++i) eligible.push_back(candidates[i].second);
        const std::vector<int> keep = kvcrush_keep(policy, area, eligible, crush, P, score_of);
        for (int page : eligible)
          if (std::ranges::find(keep, page) == keep.end()) evict.push_back(page);
      }
      std::sort(evict.begin(), evict.end());
      break;
    }
  }
  return evict;
}

KvEvictor::KvEvictor(EvictionPolicy policy, int context, int prompt) : policy_(policy) {
  if (policy_.needs_scores()) scores_.assign(static_cast<std::size_t>(context), 0);
  if (policy_.snapkv_window > 0) scores_from_ = std::max(0, prompt - policy_.snapkv_window);
}

std::vector<int> KvEvictor::pages_to_evict(const SequenceKv& kv) const {
  return kvtier::pages_to_evict(policy_, kv, scores_, scores_from_);
}

int KvEvictor::evict(SequenceKv& kv, tiers::BlockPool& pool, const KeyRotation* rotation) const {
  const auto pages = pages_to_evict(kv);
  for (int page : pages) kv.evict_block(pool, page);
  if (policy_.rotate && !pages.empty()) {
    assert(rotation != nullptr && rotation->table != nullptr);
    assert(rotation->layout.page_size == kv.page_size());
    rotate_after(kv, pool, pages, *rotation);
  }
  return static_cast<int>(pages.size());
}

void KvEvictor::rotate_after(const SequenceKv& kv, tiers::BlockPool& pool,
                             std::span<const int> evicted, const KeyRotation& rotation) {
  const KvLayout& layout = rotation.layout;
  const int P = kv.page_size();
  const auto table = kv.block_ids();
  std::size_t before = 0;  // pages of `evicted` before page j
  for (int j = evicted.front() + 1; j < static_cast<int>(table.size()); ++j) {
    while (before < evicted.size() && evicted[before] < j) ++before;
    const int count = std::min(P, kv.length() - j * P);
    if (kv.is_evicted(j) || count <= 0) continue;
    assert(!pool.is_shared(table[j]));
    auto* block = reinterpret_cast<float*>(pool.data(table[j]));
    for (int layer = 0; layer < layout.n_layer; ++layer)
      rotation.table->shift_keys(block + layer * layout.floats_per_layer(), layout.n_kv_head, P,
                                 count, -static_cast<int>(before) * P);
  }
}

int KvEvictor::rotary_offset(const SequenceKv& kv) const {
  if (!policy_.rotate) return 0;
  return (static_cast<int>(kv.block_ids().size()) - kv.resident_blocks()) * kv.page_size();
}

void KvEvictor::reset() { std::fill(scores_.begin(), scores_.end(), 0); }

}  // namespace kvtier

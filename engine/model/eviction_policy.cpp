#include "engine/model/eviction_policy.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <optional>
#include <utility>

#include "util/random.h"

namespace kvtier {
namespace {

constexpr std::string_view kForms =
    "none, window:W, sinks:S,window:W or "
    "h2o:start=S,recent=R,max=M[,agg=sum|norm_sum][,snapkv=W]"
    "[,kvcrush=B:random|zeros|ones|mean|alternate]";

constexpr std::pair<KvCrushAnchor, std::string_view> kAnchors[] = {
    {KvCrushAnchor::kRandom, "random"},
    {KvCrushAnchor::kZeros, "zeros"},
    {KvCrushAnchor::kOnes, "ones"},
    {KvCrushAnchor::kMean, "mean"},
    {KvCrushAnchor::kAlternate, "alternate"}};
// The random anchor's seed: one pattern for every request and every run.
constexpr std::uint64_t kRandomAnchorSeed = 2;

std::unexpected<std::string> bad(std::string_view text, const std::string& why) {
  return std::unexpected("eviction policy '" + std::string(text) + "': " + why + " (expected " +
                         std::string(kForms) + ")");
}

// A whole non-negative decimal number, or nullopt.
std::optional<int> parse_count(std::string_view s) {
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0)
    return std::nullopt;
  return value;
}

// Splits "a,b,c" at commas (no empty items allowed by the callers).
std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> items;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = s.find(',', begin);
    items.push_back(s.substr(begin, comma - begin));
    if (comma == std::string_view::npos) return items;
    begin = comma + 1;
  }
}

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

EvictionPolicy EvictionPolicy::sliding_window(int window, int sinks) {
  EvictionPolicy p;
  p.kind = EvictionKind::kWindow;
  p.window = window;
  p.sinks = sinks;
  return p;
}

EvictionPolicy EvictionPolicy::h2o(int start, int recent, int max_size,
                                   ScoreAggregation aggregation) {
  EvictionPolicy p;
  p.kind = EvictionKind::kH2o;
  p.start = start;
  p.recent = recent;
  p.max_size = max_size;
  p.aggregation = aggregation;
  return p;
}

std::string_view to_string(ScoreAggregation aggregation) {
  return aggregation == ScoreAggregation::kSum ? "sum" : "norm_sum";
}

std::string_view to_string(KvCrushAnchor anchor) {
  for (const auto& [a, name] : kAnchors)
    if (a == anchor) return name;
  return "unknown";
}

EvictionPolicy EvictionPolicy::with_snapkv(int window) const {
  EvictionPolicy p = *this;
  p.snapkv_window = window;
  return p;
}

EvictionPolicy EvictionPolicy::with_kvcrush(int budget, KvCrushAnchor anchor) const {
  EvictionPolicy p = *this;
  p.kvcrush_budget = budget;
  p.kvcrush_anchor = anchor;
  return p;
}

std::expected<EvictionPolicy, std::string> EvictionPolicy::parse(std::string_view text) {
  if (text == "none") return none();

  if (text.starts_with("h2o")) {
    if (!text.starts_with("h2o:")) return bad(text, "h2o needs its settings after 'h2o:'");
    std::optional<int> start, recent, max_size, snapkv;
    std::optional<ScoreAggregation> agg;
    std::optional<std::pair<int, KvCrushAnchor>> kvcrush;
    for (std::string_view item : split(text.substr(4))) {
      const std::size_t eq = item.find('=');
      const std::string_view key = item.substr(0, eq);
      const std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
      if (eq == std::string_view::npos)
        return bad(text, "'" + std::string(item) + "' is not key=value");
      if (key == "agg") {
        if (agg) return bad(text, "agg is given twice");
        if (value == "sum")
          agg = ScoreAggregation::kSum;
        else if (value == "norm_sum")
          agg = ScoreAggregation::kNormSum;
        else
          return bad(text, "agg must be sum or norm_sum, not '" + std::string(value) + "'");
        continue;
      }
      if (key == "kvcrush") {
        if (kvcrush) return bad(text, "kvcrush is given twice");
        const std::size_t colon = value.find(':');
        const std::optional<int> budget = parse_count(value.substr(0, colon));
        const std::string_view anchor =
            colon == std::string_view::npos ? "" : value.substr(colon + 1);
        const auto* found =
            std::ranges::find(kAnchors, anchor, [](const auto& a) { return a.second; });
        if (!budget || *budget < 1 || found == std::end(kAnchors))
          return bad(text,
                     "kvcrush must be BUDGET:ANCHOR, a budget of at least 1 page and an anchor "
                     "of random, zeros, ones, mean or alternate, not '" +
                         std::string(value) + "'");
        kvcrush = {*budget, found->first};
        continue;
      }
      std::optional<int>* slot = key == "start"    ? &start
                                 : key == "recent" ? &recent
                                 : key == "max"    ? &max_size
                                 : key == "snapkv" ? &snapkv
                                                   : nullptr;
      if (slot == nullptr) return bad(text, "unknown h2o setting '" + std::string(key) + "'");
      if (slot->has_value()) return bad(text, std::string(key) + " is given twice");
      *slot = parse_count(value);
      if (!slot->has_value())
        return bad(text, std::string(key) + " must be a whole number >= 0, not '" +
                             std::string(value) + "'");
    }
    if (!start || !recent || !max_size) return bad(text, "h2o needs start, recent and max");
    const EvictionPolicy p =
        h2o(*start, *recent, *max_size, agg.value_or(ScoreAggregation::kNormSum));
    if (snapkv && *snapkv < 1) return bad(text, "snapkv must be at least 1 query");
    const EvictionPolicy q = snapkv ? p.with_snapkv(*snapkv) : p;
    return kvcrush ? q.with_kvcrush(kvcrush->first, kvcrush->second) : q;
  }

  std::optional<int> sinks, window;
  for (std::string_view item : split(text)) {
    const std::size_t colon = item.find(':');
    const std::string_view key = item.substr(0, colon);
    if (colon == std::string_view::npos || (key != "sinks" && key != "window"))
      return bad(text, "unknown policy or setting '" + std::string(item) + "'");
    std::optional<int>& slot = key == "sinks" ? sinks : window;
    if (slot) return bad(text, std::string(key) + " is given twice");
    slot = parse_count(item.substr(colon + 1));
    if (!slot)
      return bad(text, std::string(key) + " must be a whole number >= 0, not '" +
                           std::string(item.substr(colon + 1)) + "'");
  }
  if (!window) return bad(text, "sinks need a window");
  if (*window < 1) return bad(text, "window must be at least 1");
  return sliding_window(*window, sinks.value_or(0));
}

std::string EvictionPolicy::to_string() const {
  switch (kind) {
    case EvictionKind::kNone:
      return "none";
    case EvictionKind::kWindow:
      return (sinks > 0 ? "sinks:" + std::to_string(sinks) + "," : std::string()) +
             "window:" + std::to_string(window);
    case EvictionKind::kH2o:
      return "h2o:start=" + std::to_string(start) + ",recent=" + std::to_string(recent) +
             ",max=" + std::to_string(max_size) +
             ",agg=" + std::string(kvtier::to_string(aggregation)) +
             (snapkv_window > 0 ? ",snapkv=" + std::to_string(snapkv_window) : std::string()) +
             (kvcrush_budget > 0 ? ",kvcrush=" + std::to_string(kvcrush_budget) + ":" +
                                       std::string(kvtier::to_string(kvcrush_anchor))
                                 : std::string());
  }
  return "unknown";
}

std::expected<void, std::string> EvictionPolicy::validate(int page_size) const {
  const std::string name = "eviction policy '" + to_string() + "': ";
  if (page_size < 1) return std::unexpected(name + "page_size must be at least 1");
  switch (kind) {
    case EvictionKind::kNone:
      return {};
    case EvictionKind::kWindow:
      if (window < 1) return std::unexpected(name + "window must be at least 1");
      if (sinks < 0) return std::unexpected(name + "sinks must not be negative");
      return {};
    case EvictionKind::kH2o: {
      const std::string ps = std::to_string(page_size);
      for (auto [key, value] : {std::pair{"start", start}, {"recent", recent}, {"max", max_size}})
        if (value < 0 || value % page_size != 0)
          return std::unexpected(name + key + " must be a multiple of page_size " + ps +
                                 " (whole pages are evicted)");
      if (max_size < start + recent + page_size)
        return std::unexpected(name + "max must be at least start + recent + page_size (" +
                               std::to_string(start + recent + page_size) +
                               ") to leave one evictable page");
      if (snapkv_window < 0) return std::unexpected(name + "snapkv must not be negative");
      if (kvcrush_budget < 0)
        return std::unexpected(name + "the kvcrush budget must not be negative");
      if (kvcrush_budget * page_size > max_size - start - recent)
        return std::unexpected(name + "the kvcrush budget of " + std::to_string(kvcrush_budget) +
                               " pages is larger than the evictable area (" +
                               std::to_string((max_size - start - recent) / page_size) +
                               " pages of " + ps + ")");
      return {};
    }
  }
  return std::unexpected(name + "unknown kind");
}

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

int KvEvictor::evict(SequenceKv& kv, tiers::BlockPool& pool) const {
  const auto pages = pages_to_evict(kv);
  for (int page : pages) kv.evict_block(pool, page);
  return static_cast<int>(pages.size());
}

void KvEvictor::reset() { std::fill(scores_.begin(), scores_.end(), 0); }

}  // namespace kvtier

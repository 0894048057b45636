#include "engine/model/eviction_policy.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <utility>

namespace kvtier {
namespace {

constexpr std::string_view kForms =
    "none, window:W, sinks:S,window:W or "
    "h2o:start=S,recent=R,max=M[,agg=sum|norm_sum][,snapkv=W]"
    "[,kvcrush=B:random|zeros|ones|mean|alternate][,rotate=on|off]";

constexpr std::pair<KvCrushAnchor, std::string_view> kAnchors[] = {
    {KvCrushAnchor::kRandom, "random"},
    {KvCrushAnchor::kZeros, "zeros"},
    {KvCrushAnchor::kOnes, "ones"},
    {KvCrushAnchor::kMean, "mean"},
    {KvCrushAnchor::kAlternate, "alternate"}};

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

EvictionPolicy EvictionPolicy::with_rotation(bool on) const {
  EvictionPolicy p = *this;
  p.rotate = on;
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
    std::optional<bool> rotate;
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
      if (key == "rotate") {
        if (rotate) return bad(text, "rotate is given twice");
        if (value != "on" && value != "off")
          return bad(text, "rotate must be on or off, not '" + std::string(value) + "'");
        rotate = value == "on";
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
    EvictionPolicy q = snapkv ? p.with_snapkv(*snapkv) : p;
    if (kvcrush) q = q.with_kvcrush(kvcrush->first, kvcrush->second);
    return q.with_rotation(rotate.value_or(false));
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
                                 : std::string()) +
             (rotate ? ",rotate=on" : "");
  }
  return "unknown";
}

std::expected<void, std::string> EvictionPolicy::check_rotation(const ModelConfig& model) const {
  if (!rotate || model.rotary) return {};
  return std::unexpected("eviction policy '" + to_string() +
                         "': rotate=on moves the kept keys to new rotary positions, but this " +
                         model.family +
                         " model's positions are learned, not rotary; drop rotate=on");
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

}  // namespace kvtier

// Sampler and StopMatcher. The contracts are in sampler.h; this file explains
// how they are kept.
#include "engine/model/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ranges>
#include <utility>

namespace kvtier {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// "%g" keeps messages short ("-1", "1.5", "nan") where std::to_string prints "-1.000000".
std::string format_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// NaN would break both the max and the ordering (it compares false with
// everything), so it is mapped to -inf before either sees it.
float sanitize(float logit) { return std::isnan(logit) ? kNegInf : logit; }

// The fixed order of the truncated walk is (logit desc, id asc). Dividing by a
// positive temperature and exponentiating preserve the logit order, so this is
// (probability desc, id asc) without computing any probability. rank_key()
// packs a NaN-free logit and an id into one integer whose ascending order is
// exactly that: std::sort on plain integers is several times faster than with
// a two-key comparator, and a strict total order makes every std algorithm
// below give the same result on every platform.
std::uint64_t rank_key(float logit, int id) {
  // Adding 0 turns -0 into +0, so that the two zeros tie as they do as floats.
  std::uint32_t bits = std::bit_cast<std::uint32_t>(logit + 0.0f);
  // Negative floats: flip all bits; positive: set the sign bit. The result
  // orders as the floats do; inverting it once more makes larger logits first.
  bits = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (std::uint64_t{~bits} << 32) | static_cast<std::uint32_t>(id);
}

int rank_key_id(std::uint64_t key) { return static_cast<int>(key & 0xffffffffu); }

// Unnormalised softmax weight exp((logit - max) / T). The max itself weighs
// exactly 1 rather than exp(inf - inf) = NaN, which is what makes +inf logits
// share the mass and an all -inf row uniform; it also makes the total >= 1, so
// there is always something to pick.
double softmax_weight(float logit, double max, double temperature) {
  return logit == max ? 1.0 : std::exp((logit - max) / temperature);
}

// Index of the first weight whose running sum exceeds `target`. Zero weights
// can never be chosen. If rounding leaves target >= the whole sum (u very
// close to 1), the last positive weight is the answer.
std::size_t pick_by_cumulative_sum(std::span<const double> weights, double target) {
  double cum = 0.0;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    cum += weights[i];
    if (cum > target) return i;
    last_positive = i;
  }
  return last_positive;
}

}  // namespace

LogprobsEntry token_logprobs(std::span<const float> logits, int token, int top) {
  float max = kNegInf;
  for (float l : logits) max = std::max(max, sanitize(l));
  double sum = 0.0;
  for (float l : logits) sum += softmax_weight(sanitize(l), max, 1.0);
  const double log_sum = std::log(sum);
  const auto logprob = [&](int id) {
    const float l = sanitize(logits[static_cast<std::size_t>(id)]);
    const double lp = l == max ? -log_sum : (l - max) - log_sum;
    return static_cast<float>(lp);
  };
  LogprobsEntry out;
  out.chosen = {token, logprob(token)};
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(top), logits.size());
  if (k == 0) return out;
  std::vector<std::uint64_t> keys(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    keys[i] = rank_key(sanitize(logits[i]), static_cast<int>(i));
  std::partial_sort(keys.begin(), keys.begin() + static_cast<long>(k), keys.end());
  for (std::size_t i = 0; i < k; ++i) {
    const int id = rank_key_id(keys[i]);
    out.top.push_back({id, logprob(id)});
  }
  return out;
}

std::expected<void, std::string> SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return std::unexpected("temperature must be finite and >= 0 (0 = greedy), got " +
                           format_float(temperature));
  }
  if (top_k < 0) {
    return std::unexpected("top_k must be >= 0 (0 = no limit), got " + std::to_string(top_k));
  }
  // Written so that NaN fails too.
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return std::unexpected("top_p must be in (0, 1] (1 = no limit), got " + format_float(top_p));
  }
  return {};
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

double Sampler::next_uniform() {
  // 53 bits fill a double's mantissa exactly: every value k / 2^53 is equally likely.
  return static_cast<double>(rng_.next() >> 11) * 0x1.0p-53;
}

int Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return sample_greedy(logits);
  // The one draw for this token, taken before looking at the logits so that
  // no branch below can change how much of the stream a token uses.
  const double u = next_uniform();
  const bool top_k_truncates =
      params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < logits.size();
  if (!top_k_truncates && params_.top_p >= 1.0f) return sample_untruncated(logits, u);
  return sample_truncated(logits, u);
}

int Sampler::sample_greedy(std::span<const float> logits) const {
  int best = 0;
  float best_logit = sanitize(logits[0]);
  for (std::size_t i = 1; i < logits.size(); ++i) {
    const float logit = sanitize(logits[i]);
    if (logit > best_logit) {  // strict, so ties keep the lower id
      best_logit = logit;
      best = static_cast<int>(i);
    }
  }
  return best;
}

// No truncation: two linear passes (max, then weights) and a walk in id
// order. No sort, which matters at V = 50257.
int Sampler::sample_untruncated(std::span<const float> logits, double u) {
  float max = kNegInf;
  for (float logit : logits) max = std::max(max, sanitize(logit));
  weights_.resize(logits.size());
  double total = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    weights_[i] = softmax_weight(sanitize(logits[i]), max, params_.temperature);
    total += weights_[i];
  }
  return static_cast<int>(pick_by_cumulative_sum(weights_, u * total));
}

// top_k and/or top_p: candidates_[0, n) become the kept tokens in rank_key
// order, with weights_[i] the weight of candidates_[i]. Every sum runs in a
// platform-independent order (id order or rank_key order), so the cut-offs and
// the pick are the same everywhere.
int Sampler::sample_truncated(std::span<const float> logits, double u) {
  const std::size_t v = logits.size();
  const double temperature = params_.temperature;
  const auto logit_of = [&](std::uint64_t key) { return sanitize(logits[rank_key_id(key)]); };
  const auto key_of = [&](std::size_t i) {
    return rank_key(sanitize(logits[i]), static_cast<int>(i));
  };
  weights_.clear();

  std::size_t n = v;
  double kept_mass = 0.0;
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < v) {
    // top_k: one pass keeping the k best in a heap (most tokens are rejected
    // by a single comparison with the heap's worst), then the heap is sorted
    // into the order both the nucleus and the walk need.
    n = static_cast<std::size_t>(params_.top_k);
    candidates_.resize(n);
    std::ranges::partial_sort_copy(
        std::views::iota(std::size_t{0}, v) | std::views::transform(key_of), candidates_);
    const double max = logit_of(candidates_[0]);
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      weights_.push_back(softmax_weight(logit_of(candidates_[i]), max, temperature));
      total += weights_.back();
    }
    kept_mass = total;
    if (params_.top_p < 1.0f) {
      const double threshold = params_.top_p * total;
      double cum = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        cum += weights_[i];
        if (cum >= threshold) {
          n = i + 1;
          break;
        }
      }
      kept_mass = cum;
    }
  } else {
    // top_p alone: the total needs every token (summed in id order), but the
    // nucleus of a language model is usually small, so sort only a growing
    // prefix until it holds enough mass instead of sorting all V.
    float max_logit = kNegInf;
    for (float logit : logits) max_logit = std::max(max_logit, sanitize(logit));
    const double max = max_logit;
    double total = 0.0;
    for (float logit : logits) total += softmax_weight(sanitize(logit), max, temperature);
    const double threshold = params_.top_p * total;

    candidates_.resize(v);
    for (std::size_t i = 0; i < v; ++i) candidates_[i] = key_of(i);
    const auto first = candidates_.begin();
    double cum = 0.0;
    bool reached = false;
    std::size_t sorted = 0;
    std::size_t chunk = 64;
    while (!reached && sorted < v) {
      std::size_t end = std::min(v, sorted + chunk);
      // Once the chunk is a large part of what is left, one sort of the rest
      // is cheaper than another selection pass over it.
      if (4 * (end - sorted) >= v - sorted) end = v;
      // Moves the best (end - sorted) of the not-yet-sorted tail into place:
      // a linear selection plus a sort of the chunk.
      if (end < v) std::nth_element(first + sorted, first + end, candidates_.end());
      std::sort(first + sorted, first + end);
      for (std::size_t i = sorted; i < end; ++i) {
        weights_.push_back(softmax_weight(logit_of(candidates_[i]), max, temperature));
        cum += weights_.back();
        if (cum >= threshold) {
          n = i + 1;
          reached = true;
          break;
        }
      }
      sorted = end;
      chunk *= 8;
    }
    // Not reached only through rounding (top_p just below 1): keep everything.
    kept_mass = cum;
  }

  const std::size_t chosen =
      pick_by_cumulative_sum(std::span<const double>(weights_).first(n), u * kept_mass);
  return rank_key_id(candidates_[chosen]);
}

std::expected<void, std::string> validate_stop_strings(const std::vector<std::string>& stops) {
  if (stops.size() > kMaxStopStrings) {
    return std::unexpected("at most " + std::to_string(kMaxStopStrings) + " stop strings, got " +
                           std::to_string(stops.size()));
  }
  for (std::size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return std::unexpected("stop string " + std::to_string(i) + " is empty");
    }
    if (stops[i].size() > kMaxStopStringBytes) {
      return std::unexpected("stop string " + std::to_string(i) + " is " +
                             std::to_string(stops[i].size()) + " bytes; the limit is " +
                             std::to_string(kMaxStopStringBytes));
    }
  }
  return {};
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& text : stops) {
    if (text.empty()) continue;
    Stop stop;
    stop.text = std::move(text);
    const std::string& t = stop.text;
    stop.border.assign(t.size(), 0);
    std::size_t k = 0;
    for (std::size_t i = 1; i < t.size(); ++i) {
      while (k > 0 && t[i] != t[k]) k = stop.border[k - 1];
      if (t[i] == t[k]) ++k;
      stop.border[i] = k;
    }
    stops_.push_back(std::move(stop));
  }
}

// Invariant between calls, while nothing is found: stop.matched is the length
// of the longest suffix of the text that is a proper prefix of stop.text.
// Advancing it over the new bytes finds every occurrence that ends inside
// `piece`, and occurrences ending earlier were already ruled out, so nothing
// before the piece is looked at again.
std::optional<std::size_t> StopMatcher::feed(std::string_view piece) {
  if (found_) return found_;
  std::optional<std::size_t> earliest;
  for (Stop& stop : stops_) {
    const std::string& t = stop.text;
    std::size_t k = stop.matched;
    for (std::size_t j = 0; j < piece.size(); ++j) {
      const char c = piece[j];
      while (k > 0 && t[k] != c) k = stop.border[k - 1];
      if (t[k] == c) ++k;
      if (k == t.size()) {
        // A stop's first occurrence in the piece is its earliest; another stop
        // may still begin earlier (a longer one that ends later), so the
        // other stops are scanned in full.
        const std::size_t start = size_ + j + 1 - t.size();
        if (!earliest || start < *earliest) earliest = start;
        k = stop.border[k - 1];
        break;
      }
    }
    stop.matched = k;
  }
  size_ += piece.size();
  found_ = earliest;
  return found_;
}

std::size_t StopMatcher::pending_bytes() const {
  if (found_) return 0;
  std::size_t pending = 0;
  for (const Stop& stop : stops_) pending = std::max(pending, stop.matched);
  return pending;
}

}  // namespace kvtier

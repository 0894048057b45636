// The scheduler's settings: names of policies and modes, and validate().
#include <string>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

std::string_view to_string(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kFcfs:
      return "fcfs";
    case SchedulingPolicy::kPriority:
      return "priority";
  }
  return "unknown";
}

std::string_view to_string(PreemptionMode mode) {
  switch (mode) {
    case PreemptionMode::kRecompute:
      return "recompute";
    case PreemptionMode::kSwap:
      return "swap";
  }
  return "unknown";
}

std::expected<SchedulingPolicy, std::string> parse_policy(std::string_view name) {
  if (name == "fcfs") return SchedulingPolicy::kFcfs;
  if (name == "priority") return SchedulingPolicy::kPriority;
  return std::unexpected("unknown policy '" + std::string(name) + "' (expected fcfs or priority)");
}

std::expected<PreemptionMode, std::string> parse_preemption(std::string_view name) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  return std::unexpected("unknown preemption mode '" + std::string(name) +
                         "' (expected recompute or swap)");
}

std::expected<void, std::string> SchedulerConfig::validate() const {
  if (page_size < 1 || page_size > kMaxPageSize)
    return std::unexpected("page_size must be 1 to " + std::to_string(kMaxPageSize) + ", got " +
                           std::to_string(page_size));
  if (max_kv_tokens < page_size)
    return std::unexpected("max_kv_tokens (" + std::to_string(max_kv_tokens) +
                           ") is smaller than one KV block (page_size " +
                           std::to_string(page_size) + ")");
  if (max_batch_size < 1)
    return std::unexpected("max_batch_size must be at least 1, got " +
                           std::to_string(max_batch_size));
  if (token_budget < 0)
    return std::unexpected("token_budget must be at least 1 (0: chosen at start), got " +
                           std::to_string(token_budget));
  if (token_budget != kAuto && token_budget < max_batch_size)
    return std::unexpected("token_budget (" + std::to_string(token_budget) +
                           ") must be at least max_batch_size (" + std::to_string(max_batch_size) +
                           ") so that every running request decodes each step");
  if (mixed_prefill_tokens < 0)
    return std::unexpected("mixed_prefill_tokens must be at least 1 (0: chosen at start), got " +
                           std::to_string(mixed_prefill_tokens));
  if (preemption == PreemptionMode::kSwap && !prefix_cache)
    return std::unexpected(
        "preemption 'swap' moves KV through the prefix cache; turn prefix_cache on or use "
        "'recompute'");
  if (!prefix_cache && (cache.l2_bytes > 0 || !cache.l3_path.empty()))
    return std::unexpected("l2_bytes and l3_path need prefix_cache on");
  if (!cache.l3_path.empty() && cache.l3_bytes == 0)
    return std::unexpected("l3_path is set but l3_bytes is 0");
  if (prefix_cache)
    if (auto ok = cache.validate(); !ok) return ok;
  return {};
}

}  // namespace kvtier

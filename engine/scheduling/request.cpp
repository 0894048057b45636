#include "engine/scheduling/request.h"

#include <utility>

namespace kvtier {

std::string_view to_string(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kPrefilling:
      return "prefilling";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kSwapped:
      return "swapped";
    case RequestStatus::kDone:
      return "done";
    case RequestStatus::kCancelled:
      return "cancelled";
    case RequestStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

bool is_terminal(RequestStatus status) {
  return status == RequestStatus::kDone || status == RequestStatus::kCancelled ||
         status == RequestStatus::kFailed;
}

std::uint64_t sample_seed(std::uint64_t seed, int index) {
  return seed ^ (static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
}

namespace {

SamplingParams with_seed(SamplingParams p, std::uint64_t seed) {
  p.seed = seed;
  return p;
}

}  // namespace

Request::Request(RequestId id, const Request& head, int index, SequenceKv kv)
    : id_(id),
      arrival_(head.arrival_),
      priority_(head.priority_),
      max_tokens_(head.max_tokens_),
      sampling_(with_seed(head.sampling_, sample_seed(head.sampling_.seed, index))),
      stop_(head.stop_),
      stop_token_ids_(head.stop_token_ids_),
      logprobs_top_(head.logprobs_top_),
      ignore_eos_(head.ignore_eos_),
      group_(head.id_),
      sample_index_(index),
      num_samples_(head.num_samples_),
      prompt_len_(head.prompt_len_),
      tokens_(head.tokens_.begin(), head.tokens_.begin() + head.prompt_len_),
      status_(RequestStatus::kRunning),
      kv_(std::move(kv)),
      sampler_(sampling_),
      stop_matcher_(stop_),
      tools_(head.tools_ ? std::optional(head.tools_->fresh()) : std::nullopt),
      evictor_(head.evictor_),
      cache_root_(head.cache_root_) {}

Request::Request(RequestId id, std::uint64_t arrival, RequestParams params, int page_size,
                 int context)
    : id_(id),
      arrival_(arrival),
      priority_(params.priority),
      max_tokens_(params.max_tokens),
      sampling_(params.sampling),
      stop_(params.stop),
      stop_token_ids_(std::move(params.stop_token_ids)),
      logprobs_top_(params.logprobs),
      ignore_eos_(params.ignore_eos),
      group_(id),
      num_samples_(params.n),
      prompt_len_(static_cast<int>(params.prompt.size())),
      tokens_(std::move(params.prompt)),
      kv_(page_size),
      sampler_(params.sampling),
      stop_matcher_(std::move(params.stop)),
      evictor_(params.eviction.value_or(EvictionPolicy::none()), context, prompt_len_) {}

}  // namespace kvtier

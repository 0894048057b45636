#include "engine/request.h"

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

Request::Request(RequestId id, std::uint64_t arrival, RequestParams params, int page_size)
    : id_(id),
      arrival_(arrival),
      priority_(params.priority),
      max_tokens_(params.max_tokens),
      sampling_(params.sampling),
      stop_(params.stop),
      prompt_len_(static_cast<int>(params.prompt.size())),
      tokens_(std::move(params.prompt)),
      kv_(page_size),
      sampler_(params.sampling),
      stop_matcher_(std::move(params.stop)) {}

}  // namespace kvtier

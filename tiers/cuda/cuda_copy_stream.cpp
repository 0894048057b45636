#include "tiers/cuda/cuda_copy_stream.h"

#include <utility>

#include "tiers/cuda/cuda_error.h"

namespace kvtier::tiers {
namespace {

// The host function behind every copy when the owner gave on_complete.
void run_on_complete(void* on_complete) { (*static_cast<std::function<void()>*>(on_complete))(); }

}  // namespace

std::expected<std::unique_ptr<CudaCopyStream>, std::string> CudaCopyStream::create(
    std::function<void()> on_complete) {
  cudaStream_t stream = nullptr;
  if (const cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      err != cudaSuccess) {
    return std::unexpected(cuda_error("cudaStreamCreateWithFlags", err));
  }
  return std::unique_ptr<CudaCopyStream>(new CudaCopyStream(stream, std::move(on_complete)));
}

CudaCopyStream::CudaCopyStream(cudaStream_t stream, std::function<void()> on_complete)
    : stream_(stream), on_complete_(std::move(on_complete)) {}

CudaCopyStream::~CudaCopyStream() {
  // Nothing to report to from here: on a lost context these fail and there
  // is nothing left to wait for or free anyway.
  (void)cudaStreamSynchronize(stream_);
  for (const Pending& p : pending_) (void)cudaEventDestroy(p.event);
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  (void)cudaStreamDestroy(stream_);
}

std::string CudaCopyStream::refuse(const char* end, const void* ptr) {
  cudaPointerAttributes attributes{};
  if (const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr); err != cudaSuccess) {
    return cuda_error(std::string("cudaPointerGetAttributes of the ") + end, err);
  }
  if (attributes.type != cudaMemoryTypeUnregistered) return {};
  return std::string("copy: the ") + end +
         " is not device, managed or page-locked host memory (pageable memory would make the copy "
         "synchronous)";
}

std::expected<cudaEvent_t, std::string> CudaCopyStream::take_event() {
  if (!free_events_.empty()) {
    const cudaEvent_t event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  // No timing: latency is measured on the host, and a timing event costs
  // more to record.
  cudaEvent_t event = nullptr;
  if (const cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
      err != cudaSuccess) {
    return std::unexpected(cuda_error("cudaEventCreateWithFlags", err));
  }
  return event;
}

std::expected<std::uint64_t, std::string> CudaCopyStream::copy(std::byte* dst, const std::byte* src,
                                                               std::size_t bytes) {
  const auto queued = std::chrono::steady_clock::now();
  if (std::string why = refuse("source", src); !why.empty()) return std::unexpected(why);
  if (std::string why = refuse("destination", dst); !why.empty()) return std::unexpected(why);
  auto event = take_event();
  if (!event) return std::unexpected(event.error());

  // The event goes in behind the copy (and notify()'s host function behind
  // the events), so an owner woken by on_complete finds the copy complete
  // when it polls.
  const char* call = "cudaMemcpyAsync";
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
  if (err == cudaSuccess) {
    call = "cudaEventRecord";
    err = cudaEventRecord(*event, stream_);
  }
  if (err != cudaSuccess) {
    std::string why = cuda_error("copy of " + std::to_string(bytes) + " bytes: " + call, err);
    // What was enqueued before the failure ends before the caller gets its
    // buffers back (a wake-up from it finds nothing new: harmless).
    (void)cudaStreamSynchronize(stream_);
    free_events_.push_back(*event);
    return std::unexpected(std::move(why));
  }
  const std::uint64_t ticket = next_ticket_++;
  pending_.push_back({ticket, *event, queued});
  return ticket;
}

std::expected<void, std::string> CudaCopyStream::notify() {
  if (!on_complete_) return {};
  if (const cudaError_t err = cudaLaunchHostFunc(stream_, run_on_complete, &on_complete_);
      err != cudaSuccess)
    return std::unexpected(cuda_error("cudaLaunchHostFunc", err));
  return {};
}

std::expected<std::vector<CopyCompletion>, std::string> CudaCopyStream::poll() {
  std::vector<CopyCompletion> out;
  const auto now = std::chrono::steady_clock::now();
  // One stream: copies end in submission order, so the first one still
  // running ends the scan.
  while (!pending_.empty()) {
    const Pending& p = pending_.front();
    const cudaError_t err = cudaEventQuery(p.event);
    if (err == cudaErrorNotReady) {
      forget_not_ready();
      break;
    }
    if (err != cudaSuccess) {
      std::string why = cuda_error("copy " + std::to_string(p.ticket) + ": cudaEventQuery", err);
      if (out.empty()) return std::unexpected(std::move(why));
      break;  // the completions first, the error next time
    }
    out.push_back({p.ticket, now - p.queued});
    free_events_.push_back(p.event);
    pending_.pop_front();
  }
  return out;
}

std::expected<void, std::string> CudaCopyStream::drain() {
  if (const cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess) {
    return std::unexpected(cuda_error("cudaStreamSynchronize", err));
  }
  return {};
}

}  // namespace kvtier::tiers

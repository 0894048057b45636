#include "tiers/cuda/cuda_memory.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "tiers/cuda/cuda_copy_stream.h"
#include "tiers/cuda/cuda_error.h"

namespace kvtier::tiers {
namespace {

// The first failure reported (report_device_failure), for every device
// region's failure probe: the process has one device.
struct DeviceFailure {
  std::mutex mu;
  std::string why;  // guarded by mu; empty until a failure is reported
};

DeviceFailure& device_failure() {
  static DeviceFailure failure;
  return failure;
}

}  // namespace

void cuda_copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  // cudaMemcpy can return before a copy from pageable memory has landed, and
  // the legacy stream it runs on is not ordered with non-blocking streams:
  // waiting for that stream makes the copy done for every later use.
  const char* call = "cudaMemcpy";
  cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (err == cudaSuccess) {
    call = "cudaStreamSynchronize";
    err = cudaStreamSynchronize(cudaStreamLegacy);
  }
  // cuda_error also clears a failure that is not sticky, which the next
  // kernel launch's check would otherwise report as its own.
  if (err != cudaSuccess)
    report_device_failure(cuda_error("copy of " + std::to_string(bytes) + " bytes: " + call, err));
}

void report_device_failure(std::string why) {
  DeviceFailure& failure = device_failure();
  const std::lock_guard lock(failure.mu);
  if (failure.why.empty()) failure.why = std::move(why);
}

std::expected<Region, std::string> cuda_device_region(std::size_t bytes) {
  if (bytes == 0) return std::unexpected("cudaMalloc of 0 bytes: nothing to lay a pool over");
  void* p = nullptr;
  if (const cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) {
    return std::unexpected(cuda_error("cudaMalloc of " + std::to_string(bytes) + " bytes", err));
  }
  // The pool's destructor cannot report a failed free, and one would only
  // mean the context is already gone with the memory.
  auto link = std::make_shared<DeviceLink>();
  link->host_memory = cuda_pinned_region;
  link->copy_queue = [](std::function<void()> on_complete)
      -> std::expected<std::unique_ptr<CopyQueue>, std::string> {
    auto stream = CudaCopyStream::create(std::move(on_complete));
    if (!stream) return std::unexpected(stream.error());
    return std::move(*stream);
  };
  // A sticky error is what every call returns once the context is lost; a
  // stream query is the cheapest call, and waits for nothing.
  link->failure = []() -> std::string {
    {
      DeviceFailure& failure = device_failure();
      const std::lock_guard lock(failure.mu);
      if (!failure.why.empty()) return failure.why;
    }
    const cudaError_t err = cudaStreamQuery(cudaStreamLegacy);
    if (err == cudaErrorNotReady) forget_not_ready();
    if (err == cudaSuccess || err == cudaErrorNotReady) return {};
    return cuda_error("cudaStreamQuery", err);
  };
  return Region{.base = static_cast<std::byte*>(p),
                .bytes = bytes,
                .free = [](std::byte* q) { (void)cudaFree(q); },
                .copy = cuda_copy,
                .link = std::move(link)};
}

std::expected<Region, std::string> cuda_pinned_region(std::size_t bytes) {
  if (bytes == 0) return std::unexpected("cudaHostAlloc of 0 bytes: nothing to lay a pool over");
  void* p = nullptr;
  if (const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); err != cudaSuccess) {
    return std::unexpected(cuda_error("cudaHostAlloc of " + std::to_string(bytes) + " bytes", err));
  }
  // Host memory: the pool reads and writes it in place (no copy function).
  return Region{.base = static_cast<std::byte*>(p), .bytes = bytes, .free = [](std::byte* q) {
                  (void)cudaFreeHost(q);
                }};
}

}  // namespace kvtier::tiers

#include "tiers/cuda/cuda_memory.h"

#include <cuda_runtime_api.h>

#include "tiers/cuda/cuda_copy_stream.h"
#include "tiers/cuda/cuda_error.h"

namespace kvtier::tiers {

void cuda_copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  // cudaMemcpy can return before a copy from pageable memory has landed, and
  // the legacy stream it runs on is not ordered with non-blocking streams:
  // waiting for that stream makes the copy done for every later use. A
  // failure here is a lost context, which the next forward reports.
  (void)cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  (void)cudaStreamSynchronize(cudaStreamLegacy);
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

#include "engine/cuda/cuda_kv_codec.h"

#include <atomic>
#include <utility>

#include "kernels/cuda/kv_quant_cuda.h"
#include "kernels/kv_quant.h"
#include "tiers/cuda/cuda_error.h"
#include "tiers/cuda/cuda_memory.h"

namespace kvtier {

using tiers::cuda_error;

std::expected<std::unique_ptr<CudaKvCodec>, std::string> CudaKvCodec::create(
    const kernels::KvShape& shape) {
  if (shape.n_layer <= 0 || shape.n_kv_head <= 0 || shape.head_dim <= 0 || shape.page_size <= 0)
    return std::unexpected(std::string("KV codec: every dimension of the block must be positive"));
  cudaStream_t stream = nullptr;
  if (const cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      err != cudaSuccess)
    return std::unexpected(cuda_error("KV codec: cudaStreamCreateWithFlags", err));
  void* scratch = nullptr;
  void* pointers = nullptr;
  cudaError_t err = cudaMalloc(&scratch, kernels::kv_quant_bytes(shape));
  if (err == cudaSuccess) err = cudaMalloc(&pointers, 2 * sizeof(void*));
  if (err != cudaSuccess) {
    (void)cudaFree(scratch);
    (void)cudaStreamDestroy(stream);
    return std::unexpected(cuda_error("KV codec: cudaMalloc", err));
  }
  return std::unique_ptr<CudaKvCodec>(new CudaKvCodec(
      shape, stream, static_cast<std::byte*>(scratch), static_cast<void**>(pointers)));
}

CudaKvCodec::CudaKvCodec(const kernels::KvShape& shape, cudaStream_t stream, std::byte* scratch,
                         void** pointers)
    : shape_(shape),
      encoded_bytes_(kernels::kv_quant_bytes(shape)),
      stream_(stream),
      scratch_(scratch),
      pointers_(pointers) {}

CudaKvCodec::~CudaKvCodec() {
  // Nothing is in flight: every call waits for its work.
  (void)cudaFree(pointers_);
  (void)cudaFree(scratch_);
  (void)cudaStreamDestroy(stream_);
}

std::expected<void, std::string> CudaKvCodec::encode(std::byte* host_dst,
                                                     const std::byte* device_src) {
  std::lock_guard lock(mu_);
  // The pointers come from pageable memory: the copy has taken them when it
  // returns, and the stream is waited for before `pointers` goes anyway.
  const void* pointers[2] = {scratch_, device_src};
  cudaError_t err =
      cudaMemcpyAsync(pointers_, pointers, sizeof pointers, cudaMemcpyHostToDevice, stream_);
  if (err == cudaSuccess)
    err = kernels::quantize_blocks_cuda(
        pointers_, reinterpret_cast<const float* const*>(pointers_ + 1), 1, shape_, stream_);
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(host_dst, scratch_, encoded_bytes_, cudaMemcpyDeviceToHost, stream_);
  return finish("KV codec: encode", err);
}

std::expected<void, std::string> CudaKvCodec::decode(std::byte* device_dst,
                                                     const std::byte* host_src) {
  std::lock_guard lock(mu_);
  const void* pointers[2] = {device_dst, scratch_};
  cudaError_t err =
      cudaMemcpyAsync(pointers_, pointers, sizeof pointers, cudaMemcpyHostToDevice, stream_);
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(scratch_, host_src, encoded_bytes_, cudaMemcpyHostToDevice, stream_);
  if (err == cudaSuccess)
    err = kernels::dequantize_blocks_cuda(reinterpret_cast<float* const*>(pointers_), pointers_ + 1,
                                          1, shape_, stream_);
  return finish("KV codec: decode", err);
}

std::expected<void, std::string> CudaKvCodec::finish(const char* what, cudaError_t err) {
  // Waited for even after a failure: nothing enqueued may outlive the call.
  const cudaError_t waited = cudaStreamSynchronize(stream_);
  if (err == cudaSuccess) err = waited;
  if (err != cudaSuccess) return std::unexpected(cuda_error(what, err));
  return {};
}

DeviceKvCodec device_kv_codec(std::shared_ptr<CudaKvCodec> codec,
                              std::function<void(const std::string&)> on_error) {
  struct Shared {
    std::shared_ptr<CudaKvCodec> codec;
    std::function<void(const std::string&)> on_error;
    std::atomic<bool> failed = false;
    void report(const std::expected<void, std::string>& done) {
      if (done) return;
      tiers::report_device_failure("int8 KV codec: " + done.error());
      if (!failed.exchange(true) && on_error) on_error(done.error());
    }
  };
  auto shared = std::make_shared<Shared>();
  shared->codec = std::move(codec);
  shared->on_error = std::move(on_error);
  DeviceKvCodec out;
  out.encode = [shared](std::byte* host_dst, const std::byte* l1_src) {
    shared->report(shared->codec->encode(host_dst, l1_src));
  };
  out.decode = [shared](std::byte* l1_dst, const std::byte* host_src) {
    shared->report(shared->codec->decode(l1_dst, host_src));
  };
  return out;
}

}  // namespace kvtier

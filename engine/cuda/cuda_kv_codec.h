// The int8 KV codec (kernels/kv_quant.h's format) on the device that holds
// L1: encodes a block in device memory into host memory and decodes host
// bytes into a block in device memory, with the kernels of
// kernels/cuda/kv_quant_cuda.h, which give the host codec's bytes. Only the
// int8 bytes cross the bus, a quarter of the fp32 block: KvCache uses it
// (DeviceKvCodec, engine/cache/transfer_plan.h) for int8 tiers under a device L1, in place of
// copying the fp32 block to the host and encoding it there.
//
// Each call is done when it returns (one stream of its own, waited for), so
// the bytes are in place for whoever reads them next, on any stream. Calls
// are serialised on a mutex: the copy worker and the engine may call at once,
// and the scratch buffers are one. Errors are the CUDA runtime's messages;
// the destination is then undefined (a failed kernel or copy is a lost
// context, which the next forward reports).
//
// The device is the one current at create(); callers' threads must have it
// current too (the daemon runs one device, the default).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/cache/transfer_plan.h"
#include "kernels/kv_shape.h"

namespace kvtier {

class CudaKvCodec {
 public:
  // Scratch for one block of `shape`, or why not (no device, no memory, a
  // bad shape).
  static std::expected<std::unique_ptr<CudaKvCodec>, std::string> create(
      const kernels::KvShape& shape);
  ~CudaKvCodec();
  CudaKvCodec(const CudaKvCodec&) = delete;
  CudaKvCodec& operator=(const CudaKvCodec&) = delete;

  // host_dst (kv_quant_bytes(shape) bytes) = the encoding of the fp32 block
  // at device_src.
  std::expected<void, std::string> encode(std::byte* host_dst, const std::byte* device_src);
  // device_dst (floats_per_block() floats) = the decoding of host_src.
  std::expected<void, std::string> decode(std::byte* device_dst, const std::byte* host_src);

 private:
  CudaKvCodec(const kernels::KvShape& shape, cudaStream_t stream, std::byte* scratch,
              void** pointers);
  // Waits for the stream; the first failure, named after `what`, if any.
  std::expected<void, std::string> finish(const char* what, cudaError_t err);

  kernels::KvShape shape_;
  std::size_t encoded_bytes_;
  std::mutex mu_;  // one call at a time: the buffers below are shared
  cudaStream_t stream_;
  std::byte* scratch_;  // device: one encoded block
  void** pointers_;     // device: the kernels' dst and src block pointers
};

// The codec as KvCache takes it (ForwardPass::kv_codec), sharing `codec`.
// The first failure goes to on_error, once. A failed call cannot say that
// the block it wrote is wrong, so it is reported as the device's failure too
// (tiers::report_device_failure): nothing more is kept on L3.
DeviceKvCodec device_kv_codec(std::shared_ptr<CudaKvCodec> codec,
                              std::function<void(const std::string&)> on_error);

}  // namespace kvtier

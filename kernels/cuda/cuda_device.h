// Whether this process can run the CUDA kernels, for the GPU tests and the
// kernel benchmark: they skip, with the reason, when it cannot.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace kvtier::kernels {

// Empty when a CUDA device is usable; otherwise why not, as
// "no CUDA device: <cudaGetErrorString>".
inline std::string cuda_device_missing() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not a sticky error: clear it for later calls
    return std::string("no CUDA device: ") + cudaGetErrorString(err);
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount() found none";
  return {};
}

}  // namespace kvtier::kernels

// Whether the kernels can run here (kernels/cuda/cuda_device.h), asked of
// the CUDA runtime.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include "kernels/cuda/cuda_device.h"

namespace kvtier::kernels {
namespace {

// Built for the same architectures as every other kernel here: the runtime
// finds code for it exactly when it finds code for them.
__global__ void probe_kernel() {}

// A failed call's message; the failure is not sticky, so it is cleared for
// the calls after it.
std::string why(const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  return std::string(call) + ": " + cudaGetErrorString(err);
}

}  // namespace

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

// Whether NVIDIA's kernel driver is loaded: it makes /proc/driver/nvidia.
// Without it the runtime says "CUDA driver version is insufficient for CUDA
// runtime version", which reads as an old driver on a machine with none.
bool nvidia_driver_loaded() { return ::access("/proc/driver/nvidia/version", F_OK) == 0; }

std::string cuda_device_missing() {
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    if (!nvidia_driver_loaded()) return "no NVIDIA GPU or driver on this machine";
    if (counted != cudaSuccess) return "no CUDA device: " + why("cudaGetDeviceCount", counted);
    return "no CUDA device: cudaGetDeviceCount() found none";
  }
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err == cudaSuccess) return {};
  const std::string reason = why("cudaFuncGetAttributes", err);
  std::string device = "the CUDA device";
  int id = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&id) == cudaSuccess && cudaGetDeviceProperties(&prop, id) == cudaSuccess)
    device = "CUDA device " + std::to_string(id) + " (" + prop.name + ", compute capability " +
             std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
  (void)cudaGetLastError();
  return device + " cannot run the kernels, built for sm " KVTIER_CUDA_ARCHITECTURES ": " + reason;
}

}  // namespace kvtier::kernels

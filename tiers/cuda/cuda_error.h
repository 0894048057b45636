// How tiers/cuda turns a CUDA runtime status into the message it returns.
// Internal to tiers/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace kvtier::tiers {

// "<call> failed: <cudaGetErrorString> (<cudaGetErrorName>)". Also clears the
// runtime's last error, so that a failure reported here is not reported again
// by the next unrelated check (a sticky error stays: the context is lost).
inline std::string cuda_error(const std::string& call, cudaError_t err) {
  (void)cudaGetLastError();
  return call + " failed: " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
}

// After a query of work still running: cudaErrorNotReady is not an error,
// but should the runtime keep it as the thread's last error, the next kernel
// launch's check must not find it there.
inline void forget_not_ready() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
}

}  // namespace kvtier::tiers

// Whether this process can run the CUDA kernels, for the GPU tests, the
// kernel benchmark and the daemon's choice of device: they skip (or fall back
// to the CPU), with the reason, when it cannot.
#pragma once

#include <string>

namespace kvtier::kernels {

// Whether the runtime sees a CUDA device at all, usable or not.
bool cuda_device_present();

// Empty when the kernels can run on the current device; otherwise why not:
// "no NVIDIA GPU or driver on this machine" when NVIDIA's driver is not
// loaded, "no CUDA device: <cudaGetErrorString>" when it is but the runtime
// finds no device, or the device,
// its compute capability and the architectures the kernels were built for
// when they hold no code it runs (a device older than the oldest of them).
std::string cuda_device_missing();

}  // namespace kvtier::kernels

// The GPU's half of open_device (engine/device.h), built only with the CUDA
// side: the model's weights copied to the current device (CudaModel), L1 in
// device memory, and the int8 codec for int8 tiers, as one Device.
#pragma once

#include <expected>
#include <string>

#include "engine/device.h"
#include "engine/model/gpt2/gpt2_model.h"

namespace kvtier {

// REQUIRES: the kernels can run on the current device
// (kernels::cuda_device_missing() is empty): open_device has checked, and
// chosen the GPU. Errors start "device cuda: "; the device's line goes to
// options.on_info.
std::expected<Device, std::string> cuda_device_open(const Gpt2Model& model,
                                                    const SchedulerConfig& scheduler,
                                                    const DeviceOptions& options);

}  // namespace kvtier

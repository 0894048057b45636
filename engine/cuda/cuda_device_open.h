// The GPU's half of open_device (engine/device.h), built only with the CUDA
// side: the model's weights copied to the current device (its family's GPU
// forward), L1 in
// device memory, and the int8 codec for int8 tiers, as one Device.
#pragma once

#include <expected>
#include <string>

#include "engine/device.h"
#include "engine/model/model.h"

namespace kvtier {

// Empty when `model`'s family has a GPU forward (GPT-2: CudaModel;
// nanochat: CudaNanochatModel, in a build with KVTIER_CUDA_NANOCHAT=ON,
// until it has run on a GPU); else why not, for open_device's message.
std::string cuda_forward_missing(const Model& model);

// REQUIRES: the kernels can run on the current device
// (kernels::cuda_device_missing() is empty): open_device has checked, and
// chosen the GPU. Errors start "device cuda: " (a family without a GPU
// forward among them); the device's line goes to options.on_info.
std::expected<Device, std::string> cuda_device_open(const Model& model,
                                                    const SchedulerConfig& scheduler,
                                                    const DeviceOptions& options);

}  // namespace kvtier

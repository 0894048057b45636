#include "engine/device.h"

#if defined(KVTIER_HAVE_CUDA)
#include "engine/cuda/cuda_device_open.h"
#include "kernels/cuda/cuda_device.h"
#endif

namespace kvtier {

std::expected<Device, std::string> open_device([[maybe_unused]] const Model& model,
                                               [[maybe_unused]] const SchedulerConfig& scheduler,
                                               const DeviceOptions& options) {
  const std::string& kind = options.kind;
  if (kind != "auto" && kind != "cpu" && kind != "cuda")
    return std::unexpected("device must be auto, cpu or cuda, got '" + kind + "'");
  // cpu asks nothing of the CUDA runtime: probing whether the kernels run
  // creates a context on the GPU, which takes its memory and start-up time
  // for a device that will not be used.
  if (kind == "cpu") return Device{};
#if defined(KVTIER_HAVE_CUDA)
  auto say = [&options](const std::string& line) {
    if (options.on_info) options.on_info(line);
  };
  if (const std::string missing = kernels::cuda_device_missing(); !missing.empty()) {
    if (kind == "cuda") return std::unexpected("device cuda: " + missing);
    // A warning: who built for the GPU most likely expected it.
    if (options.on_warning) options.on_warning("device: cpu (" + missing + ")");
    return Device{};
  }
  // A family without a GPU forward runs on the CPU engine (a warning for
  // auto: who built for the GPU expected it).
  if (const std::string why = cuda_forward_missing(model); !why.empty()) {
    if (kind == "cuda") return std::unexpected("device cuda: " + why);
    if (options.on_warning) options.on_warning("device: cpu (" + why + ")");
    return Device{};
  }
  if (kind == "auto" && scheduler.eviction.needs_scores()) {
    say("device: cpu (eviction h2o needs attention scores, which the GPU does not gather)");
    return Device{};
  }
  return cuda_device_open(model, scheduler, options);
#else
  if (kind == "cuda")
    return std::unexpected(
        "device cuda: this kvtierd was built without CUDA (no nvcc at build time, or "
        "KVTIER_CUDA=OFF)");
  return Device{};
#endif
}

}  // namespace kvtier

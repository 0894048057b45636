#include "engine/cuda/cuda_device_open.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "engine/cache/store_tiers.h"
#include "engine/cuda/cuda_kv_codec.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/cuda_nanochat_model.h"
#include "tiers/cuda/cuda_memory.h"

namespace kvtier {

namespace {

// int8 tiers under an L1 on the GPU encode and decode there, so that only
// the int8 bytes cross the bus. Without the codec (not asked for, or it
// could not be made) the cache encodes on the host.
DeviceKvCodec int8_codec(const Model& model, const SchedulerConfig& scheduler,
                         const DeviceOptions& options) {
  const CacheConfig& c = scheduler.cache;
  if (!options.int8_on_device) return {};
  const std::vector<StoreTierSpec> stores = store_tiers(c);
  const bool int8_tier = c.l2_format == KvFormat::kInt8 ||
                         std::any_of(stores.begin(), stores.end(),
                                     [](const auto& s) { return s.format == KvFormat::kInt8; });
  if (!int8_tier) return {};
  auto codec = CudaKvCodec::create(model.kv_layout(scheduler.page_size).shape());
  if (!codec) {
    if (options.on_warning) options.on_warning("int8 tiers encode on the host: " + codec.error());
    return {};
  }
  return device_kv_codec(std::move(*codec), [on_error = options.on_error](const std::string& why) {
    if (on_error) on_error("int8 KV codec on the GPU: " + why);
  });
}

// The family's GPU forward with the model's weights on the device: a
// CudaModel or a CudaNanochatModel, shared by every copy of the forward.
struct GpuForward {
  decltype(ForwardPass::run) run;
  std::size_t weight_bytes = 0;
};

template <typename Forward>
std::expected<GpuForward, std::string> share(
    std::expected<std::unique_ptr<Forward>, std::string> created) {
  if (!created) return std::unexpected(created.error());
  std::shared_ptr<Forward> gpu(std::move(*created));
  GpuForward f;
  f.weight_bytes = gpu->weight_bytes();
  f.run = [gpu](std::span<const Model::Chunk> chunks, tiers::BlockPool& pool,
                const std::function<void(int)>& before_attention) {
    return gpu->forward(chunks, pool, before_attention);
  };
  return f;
}

std::expected<GpuForward, std::string> gpu_forward(const Model& model) {
  if (const auto* gpt2 = dynamic_cast<const Gpt2Model*>(&model))
    return share(CudaModel::create(*gpt2));
#if defined(KVTIER_CUDA_NANOCHAT)
  if (const auto* nanochat = dynamic_cast<const NanochatModel*>(&model))
    return share(CudaNanochatModel::create(*nanochat));
#endif
  return std::unexpected(cuda_forward_missing(model));
}

}  // namespace

std::string cuda_forward_missing(const Model& model) {
  if (dynamic_cast<const Gpt2Model*>(&model) != nullptr) return {};
  if (dynamic_cast<const NanochatModel*>(&model) != nullptr) {
#if defined(KVTIER_CUDA_NANOCHAT)
    return {};
#else
    return "a nanochat model runs on the CPU engine: its GPU forward is built only with "
           "-DKVTIER_CUDA_NANOCHAT=ON until it has been checked on a GPU";
#endif
  }
  return "a " + std::string(model.family()) +
         " model runs on the CPU engine; its GPU kernels are not written yet";
}

std::expected<Device, std::string> cuda_device_open(const Model& model,
                                                    const SchedulerConfig& scheduler,
                                                    const DeviceOptions& options) {
  auto gpu = gpu_forward(model);
  if (!gpu) return std::unexpected("device cuda: " + gpu.error());
  // L1 as the scheduler would size it on the host.
  const auto [block_bytes, blocks] =
      Scheduler::l1_shape(model.kv_layout(scheduler.page_size), scheduler);
  if (blocks <= 0) return std::unexpected("device cuda: max_kv_tokens holds no block");
  auto region = tiers::cuda_device_region(block_bytes * static_cast<std::size_t>(blocks));
  if (!region)
    return std::unexpected("device cuda: L1 of " + std::to_string(blocks) +
                           " blocks: " + region.error());
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  if (options.on_info)
    options.on_info("device: cuda (" + std::string(prop.name) + "): weights " +
                    std::to_string(gpu->weight_bytes >> 20) + " MiB, L1 " + std::to_string(blocks) +
                    " blocks (" + std::to_string((block_bytes * blocks) >> 20) +
                    " MiB) in device memory");
  Device d;
  d.name = "cuda (" + std::string(prop.name) + ")";
  d.weight_bytes = gpu->weight_bytes;
  d.l1 = std::make_unique<tiers::BlockPool>(block_bytes, blocks, std::move(*region));
  // The forward owns the weights on the device: the scheduler's copy keeps
  // them for as long as it runs.
  d.forward.run = std::move(gpu->run);
  d.forward.gathers_scores = false;
  d.forward.kv_tag = CudaModel::kKvTag;
  d.forward.kv_codec = int8_codec(model, scheduler, options);
  return d;
}

}  // namespace kvtier

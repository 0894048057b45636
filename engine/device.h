// Where the forward runs and where L1 lives: the one place that composes a
// device (kvtierd's --device, the benchmarks, the GPU tests), so that its
// callers need nothing from tiers/ or kernels/ and no CUDA header.
//
// open_device picks by DeviceOptions::kind:
//   cpu   the CPU forward (Model::forward) over an L1 in host memory, which
//         Scheduler::create makes itself: the Device is empty.
//   cuda  the GPU forward (engine/cuda/cuda_model.h) over an L1 in device
//         memory, or an error starting "device cuda: " with the reason (a
//         build without CUDA, no usable device, out of device memory, a
//         model of a family with no GPU forward: GPT-2 has one; nanochat's,
//         engine/cuda/cuda_nanochat_model.h, is picked only in a build with
//         KVTIER_CUDA_NANOCHAT=ON until it has run on a GPU). Never a
//         silent fall-back: a caller who asked for the GPU learns why not.
//   auto  cuda when this build has the CUDA side, a device can run its
//         kernels, the model's family has GPU kernels and the scheduler's
//         default eviction policy does not need attention scores (H2O: the
//         GPU gathers none); else cpu, saying why (in a build with the CUDA
//         side): no usable GPU or no kernels for the family through
//         on_warning, the eviction policy's choice through on_info. A GPU that is
//         usable but then fails to open (out of memory) is an error, as for
//         cuda: auto falls back only where the GPU cannot serve at all.
//
// Without the CUDA side (KVTIER_CUDA, top-level CMakeLists.txt) this is the
// CPU alone: the target kvtier_device links kvtier_engine_cuda only when it
// is built.
//
// Lifetimes: `model` must outlive the Device and every copy of its forward
// (the GPU forward reads its config). The Device's L1 must outlive the
// scheduler given it (the scheduler's cache hands its blocks back as it
// goes). The GPU's copy of the weights belongs to the forward: copies of
// Device::forward share it, and it is freed with the last one.
//
// Thread-safety: open_device may be called from any thread; the GPU is the
// calling thread's current device, and threads that run the forward must
// have it current too (kvtierd runs one device, the default).
#pragma once

#include <cstddef>
#include <expected>
#include <functional>
#include <memory>
#include <string>

#include "engine/model/model.h"
#include "engine/scheduling/scheduler.h"
#include "tiers/block_pool.h"

namespace kvtier {

struct DeviceOptions {
  // "cpu", "cuda" or "auto" (see the top). Anything else is refused.
  std::string kind = "cpu";
  // int8 tiers (CacheConfig::l2_format, l3_format) under an L1 on the GPU
  // are encoded and decoded there (engine/cuda/cuda_kv_codec.h), so that
  // only the int8 bytes cross the bus. false: on the host, the fp32 block
  // passing through a host buffer; the same bytes, for tests that compare
  // the two.
  bool int8_on_device = true;
  // Lines for the operator; an empty one drops them. (Initialised, so that
  // `{.kind = "cuda"}` may leave them out without a warning.)
  // on_info: which device was picked (auto: why the CPU, when the policy
  // chose it), what the GPU holds.
  std::function<void(const std::string&)> on_info = {};
  // on_warning: a part the GPU runs without (the int8 codec could not be
  // made: int8 tiers then encode on the host).
  std::function<void(const std::string&)> on_warning = {};
  // on_error: the GPU's int8 codec failed, once, later, on the thread that
  // called it (the copy worker's or the engine's): it must be thread-safe.
  // Nothing copied off the device since is kept on L3.
  std::function<void(const std::string&)> on_error = {};
};

struct Device {
  // "cpu", or "cuda (<device name>)": what kvtierd reports as its device.
  std::string name = "cpu";
  // L1 in device memory, for Scheduler::create's `pool`: the blocks
  // Scheduler::l1_shape gives for the scheduler's config, as the scheduler
  // would lay them on the host. Null on the CPU (the scheduler makes its own).
  std::unique_ptr<tiers::BlockPool> l1;
  // For Scheduler::create's `forward`. On the CPU the default (Model's own
  // forward). On the GPU: the family's GPU forward, no attention scores, the GPU's
  // kv_tag (its KV is its own in the prefix cache and on L3), and the int8
  // codec when int8 tiers are asked for.
  ForwardPass forward;
  // Bytes of device memory the weights take; 0 on the CPU.
  std::size_t weight_bytes = 0;
};

// The device `options` ask for, for a scheduler with `scheduler`'s config
// (page_size, max_kv_tokens, l1_bytes and prefix_cache size L1; eviction
// decides auto; the cache's formats decide the int8 codec). Errors are
// ready to print: "device must be auto, cpu or cuda, got '...'", or
// "device cuda: <reason>". REQUIRES: scheduler.page_size >= 1 (the GPU's
// L1 is sized from it); the rest of the config is Scheduler::create's to
// check.
std::expected<Device, std::string> open_device(const Model& model, const SchedulerConfig& scheduler,
                                               const DeviceOptions& options);

}  // namespace kvtier

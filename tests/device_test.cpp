// open_device (engine/device.h): what cpu, cuda and auto pick and what they
// say. Runs in every build: where this one cannot use a GPU (no CUDA side, or
// no usable device) it checks the refusal and the fall-back; where it can, it
// checks auto's choice (the GPU's own Device: cuda_device_open_test.cpp).
#include "engine/device.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#if defined(KVTIER_HAVE_CUDA)
#include "kernels/cuda/cuda_device.h"
#endif

namespace kvtier {
namespace {

// Empty when this process can run the forward on a GPU, else why not.
std::string gpu_missing() {
#if defined(KVTIER_HAVE_CUDA)
  return kernels::cuda_device_missing();
#else
  return "built without the CUDA side";
#endif
}

// Options of `kind` whose lines land in `info`, and fail the test as
// warnings or errors.
DeviceOptions options(const std::string& kind, std::vector<std::string>& info) {
  DeviceOptions o{.kind = kind};
  o.on_info = [&info](const std::string& line) { info.push_back(line); };
  o.on_warning = o.on_error = [](const std::string& line) { ADD_FAILURE() << line; };
  return o;
}

TEST(DeviceTest, CpuIsTheModelsOwnForwardAndLeavesL1ToTheScheduler) {
  std::vector<std::string> info;
  auto d = open_device(test_util::bundled_model().model, {}, options("cpu", info));
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_EQ(d->name, "cpu");
  EXPECT_EQ(d->l1, nullptr);
  EXPECT_FALSE(d->forward.run);
  EXPECT_TRUE(d->forward.gathers_scores);
  EXPECT_EQ(d->forward.kv_tag, 0u);
  EXPECT_FALSE(d->forward.kv_codec.encode);
  EXPECT_EQ(d->weight_bytes, 0u);
  EXPECT_TRUE(info.empty());
}

TEST(DeviceTest, AnUnknownKindIsRefusedWithTheChoices) {
  std::vector<std::string> info;
  auto d = open_device(test_util::bundled_model().model, {}, options("gpu", info));
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error(), "device must be auto, cpu or cuda, got 'gpu'");
}

// cuda is never a silent fall-back; auto is, and (with the CUDA side built)
// says why.
TEST(DeviceTest, WithoutAGpuCudaIsRefusedWithTheReasonAndAutoRunsOnTheCpu) {
  if (gpu_missing().empty()) GTEST_SKIP() << "a usable CUDA device is present";
  std::vector<std::string> info;
  auto cuda = open_device(test_util::bundled_model().model, {}, options("cuda", info));
  ASSERT_FALSE(cuda.has_value());
  EXPECT_TRUE(cuda.error().starts_with("device cuda: ")) << cuda.error();
  EXPECT_TRUE(info.empty());
  // The fall-back is a warning: who built for the GPU expected it.
  DeviceOptions automatic = options("auto", info);
  std::vector<std::string> warnings;
  automatic.on_warning = [&warnings](const std::string& line) { warnings.push_back(line); };
  auto d = open_device(test_util::bundled_model().model, {}, automatic);
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_EQ(d->name, "cpu");
  EXPECT_EQ(d->l1, nullptr);
  EXPECT_TRUE(info.empty());
#if defined(KVTIER_HAVE_CUDA)
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "device: cpu (" + gpu_missing() + ")");
#else
  EXPECT_TRUE(warnings.empty());
#endif
}

// The GPU gathers no attention scores: auto keeps an H2O default on the CPU,
// which does, and picks the GPU otherwise.
TEST(DeviceTest, AutoPicksTheGpuUnlessTheDefaultEvictionNeedsScores) {
  if (const std::string missing = gpu_missing(); !missing.empty()) GTEST_SKIP() << missing;
  SchedulerConfig h2o;
  h2o.eviction = EvictionPolicy::h2o(16, 16, 64);
  std::vector<std::string> info;
  auto cpu = open_device(test_util::bundled_model().model, h2o, options("auto", info));
  ASSERT_TRUE(cpu.has_value()) << cpu.error();
  EXPECT_EQ(cpu->name, "cpu");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_TRUE(test_util::contains(info[0], "eviction h2o needs attention scores")) << info[0];
  auto gpu = open_device(test_util::bundled_model().model, {}, options("auto", info));
  ASSERT_TRUE(gpu.has_value()) << gpu.error();
  EXPECT_TRUE(gpu->name.starts_with("cuda (")) << gpu->name;
  EXPECT_NE(gpu->l1, nullptr);
}

}  // namespace
}  // namespace kvtier

// The GPU's Device (engine/cuda/cuda_device_open.h, through open_device):
// L1 in device memory as the scheduler would lay it out on the host, the GPU
// forward with its kv_tag and no attention scores, and the int8 codec only
// for int8 tiers, and only when asked for. Skipped with the reason without a
// device; what auto and cuda do without one: device_test.cpp.
#include "engine/cuda/cuda_device_open.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/cuda/cuda_model.h"
#include "engine/device.h"
#include "test_util.h"
#include "tests/cuda_test_util.h"

namespace kvtier {
namespace {

using CudaDeviceOpenTest = cuda_test_util::CudaDeviceTest;

// Options for cuda whose lines land in `info`, and fail the test as warnings
// or errors.
DeviceOptions cuda(std::vector<std::string>& info, bool int8_on_device = true) {
  DeviceOptions o{.kind = "cuda", .int8_on_device = int8_on_device};
  o.on_info = [&info](const std::string& line) { info.push_back(line); };
  o.on_warning = o.on_error = [](const std::string& line) { ADD_FAILURE() << line; };
  return o;
}

TEST_F(CudaDeviceOpenTest, CudaIsTheGpuForwardOverTheL1TheSchedulerWouldLayOut) {
  Model& model = test_util::bundled_model().model;
  SchedulerConfig c;
  c.prefix_cache = true;  // blocks rounded to whole pages
  c.max_kv_tokens = 160;
  c.l1_bytes = 1 << 20;  // more blocks than max_kv_tokens'
  std::vector<std::string> info;
  auto d = open_device(model, c, cuda(info));
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_TRUE(d->name.starts_with("cuda (")) << d->name;
  ASSERT_NE(d->l1, nullptr);
  EXPECT_FALSE(d->l1->host_addressable());
  const auto shape = Scheduler::l1_shape(model.kv_layout(c.page_size), c);
  EXPECT_EQ(d->l1->block_bytes(), shape.block_bytes);
  EXPECT_EQ(d->l1->num_blocks(), shape.blocks);
  EXPECT_TRUE(d->forward.run);
  EXPECT_FALSE(d->forward.gathers_scores);
  EXPECT_EQ(d->forward.kv_tag, CudaModel::kKvTag);
  EXPECT_FALSE(d->forward.kv_codec.encode) << "exact tiers need no codec";
  EXPECT_GT(d->weight_bytes, 0u);
  ASSERT_EQ(info.size(), 1u);
  EXPECT_TRUE(info[0].starts_with("device: cuda (")) << info[0];
  // The scheduler takes both.
  auto s = Scheduler::create(model, nullptr, c, d->l1.get(), d->forward);
  EXPECT_TRUE(s.has_value()) << s.error();
}

TEST_F(CudaDeviceOpenTest, Int8TiersGetTheGpusCodecUnlessTheHostsIsAskedFor) {
  Model& model = test_util::bundled_model().model;
  SchedulerConfig c;
  c.prefix_cache = true;
  c.cache.l2_bytes = 1 << 20;
  c.cache.l2_format = KvFormat::kInt8;
  std::vector<std::string> info;
  auto gpu = open_device(model, c, cuda(info));
  ASSERT_TRUE(gpu.has_value()) << gpu.error();
  EXPECT_TRUE(gpu->forward.kv_codec.encode);
  EXPECT_TRUE(gpu->forward.kv_codec.decode);
  auto host = open_device(model, c, cuda(info, false));
  ASSERT_TRUE(host.has_value()) << host.error();
  EXPECT_FALSE(host->forward.kv_codec.encode);
  EXPECT_FALSE(host->forward.kv_codec.decode);
}

}  // namespace
}  // namespace kvtier

// Every CUDA kernel against its CPU reference on random inputs (the
// llama.cpp test-backend-ops habit): int8 quantisation byte for byte, block
// gather/scatter byte for byte, paged attention within tolerance (and bit
// for bit between a row alone and in a batch). Built only with the CUDA side;
// on a machine without a device every test is skipped with the reason.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/block_gather.h"
#include "kernels/cuda/block_gather_cuda.h"
#include "kernels/cuda/kv_quant_cuda.h"
#include "kernels/cuda/paged_attention_cuda.h"
#include "kernels/kv_quant.h"
#include "kernels/paged_attention.h"
#include "tests/cuda_test_util.h"

namespace kvtier::kernels {
namespace {

using cuda_test_util::DeviceBuffer;
using cuda_test_util::random_floats;
using cuda_test_util::to_device;
using CudaKernels = cuda_test_util::CudaDeviceTest;

TEST_F(CudaKernels, QuantizeAndDequantizeGiveTheCpuBytes) {
  const KvShape shape{3, 4, 64, 16};
  const int n = 5;
  const std::size_t fp32 = sizeof(float) * shape.floats_per_block(), enc = kv_quant_bytes(shape);
  std::vector<std::vector<float>> host;
  std::vector<std::unique_ptr<DeviceBuffer>> src, dst, back;
  std::vector<const float*> src_ptrs;
  std::vector<void*> dst_ptrs;
  std::vector<float*> back_ptrs;
  for (int b = 0; b < n; ++b) {
    host.push_back(random_floats(shape.floats_per_block(), 100 + b, std::ldexp(1.0f, b * 4 - 8)));
    if (b == 2) std::fill(host[b].begin(), host[b].begin() + shape.floats_per_run(), 0.0f);
    src.push_back(to_device(host[b]));
    dst.push_back(std::make_unique<DeviceBuffer>(enc));
    back.push_back(std::make_unique<DeviceBuffer>(fp32));
    src_ptrs.push_back(src[b]->as<float>());
    dst_ptrs.push_back(dst[b]->as<void>());
    back_ptrs.push_back(back[b]->as<float>());
  }
  auto d_src = to_device(src_ptrs), d_dst = to_device(dst_ptrs), d_back = to_device(back_ptrs);
  CUDA_OK(
      quantize_blocks_cuda(d_dst->as<void* const>(), d_src->as<const float* const>(), n, shape, 0));
  CUDA_OK(dequantize_blocks_cuda(d_back->as<float* const>(), d_dst->as<const void* const>(), n,
                                 shape, 0));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> cpu_enc((enc + 3) / 4), gpu_enc((enc + 3) / 4);
  std::vector<float> cpu_back(shape.floats_per_block()), gpu_back(shape.floats_per_block());
  for (int b = 0; b < n; ++b) {
    quantize_block(host[b].data(), shape, cpu_enc.data());
    dst[b]->download(gpu_enc.data());
    EXPECT_EQ(std::memcmp(cpu_enc.data(), gpu_enc.data(), enc), 0) << "encoded block " << b;
    dequantize_block(cpu_enc.data(), shape, cpu_back.data());
    back[b]->download(gpu_back.data());
    EXPECT_EQ(std::memcmp(cpu_back.data(), gpu_back.data(), fp32), 0) << "decoded block " << b;
  }
}

TEST_F(CudaKernels, GatherAndScatterGiveTheCpuBytes) {
  const std::size_t bytes = 65536 + 16;
  const int n = 6;
  std::vector<std::unique_ptr<DeviceBuffer>> blocks, back;
  std::vector<std::vector<unsigned char>> host(n, std::vector<unsigned char>(bytes));
  std::vector<const void*> src_ptrs;
  std::vector<void*> dst_ptrs;
  for (int b = 0; b < n; ++b) {
    for (std::size_t i = 0; i < bytes; ++i) host[b][i] = static_cast<unsigned char>(i * 31 + b * 7);
    blocks.push_back(to_device(host[b]));
    back.push_back(to_device(std::vector<unsigned char>(bytes, 0xEE)));
    src_ptrs.push_back(b == 3 ? nullptr : blocks[b]->as<void>());  // block 3 absent
    dst_ptrs.push_back(b == 4 ? nullptr : back[b]->as<void>());    // slot 4 not written back
  }
  auto d_src = to_device(src_ptrs), d_dst = to_device(dst_ptrs);
  auto staging = to_device(std::vector<unsigned char>(n * bytes, 0x5A));
  CUDA_OK(block_gather_cuda(staging->as<void>(), d_src->as<const void* const>(), n, bytes, 0));
  CUDA_OK(block_scatter_cuda(d_dst->as<void* const>(), staging->as<const void>(), n, bytes, 0));
  CUDA_OK(cudaDeviceSynchronize());

  // The CPU reference over host copies of the same blocks.
  std::vector<const void*> cpu_src;
  for (int b = 0; b < n; ++b) cpu_src.push_back(b == 3 ? nullptr : host[b].data());
  std::vector<BlockWord> cpu_staging(n * bytes / sizeof(BlockWord));
  std::memset(cpu_staging.data(), 0x5A, n * bytes);
  block_gather(cpu_staging.data(), cpu_src.data(), n, bytes);
  std::vector<unsigned char> gpu_staging(n * bytes);
  staging->download(gpu_staging.data());
  EXPECT_EQ(std::memcmp(cpu_staging.data(), gpu_staging.data(), n * bytes), 0);
  std::vector<unsigned char> got(bytes);
  for (int b = 0; b < n; ++b) {
    back[b]->download(got.data());
    const auto* want =
        b == 4 ? nullptr : reinterpret_cast<const unsigned char*>(cpu_staging.data()) + b * bytes;
    if (want == nullptr) {
      EXPECT_EQ(got, std::vector<unsigned char>(bytes, 0xEE)) << "null slot written";
    } else {
      EXPECT_EQ(std::memcmp(got.data(), want, bytes), 0) << "block " << b;
    }
  }
}

// Sequences of random KV in device blocks, and the same blocks on the host.
struct PagedSetup {
  KvShape shape{2, 2, 64, 16};
  int layer = 1, n_head = 6;  // three query heads per KV head
  std::vector<std::vector<float>> host_blocks;
  std::vector<std::unique_ptr<DeviceBuffer>> device_blocks;
  std::vector<const float*> host_table, device_table;  // all sequences' tables, concatenated
  std::vector<int> seq_start;

  void add_sequence(int n_pos, unsigned seed, const std::vector<int>& absent_pages) {
    seq_start.push_back(static_cast<int>(host_table.size()));
    const int pages = (n_pos + shape.page_size - 1) / shape.page_size;
    for (int p = 0; p < pages; ++p) {
      host_blocks.push_back(random_floats(shape.floats_per_block(), seed * 1000 + p));
      device_blocks.push_back(to_device(host_blocks.back()));
      const bool absent =
          std::find(absent_pages.begin(), absent_pages.end(), p) != absent_pages.end();
      host_table.push_back(absent ? nullptr : host_blocks.back().data());
      device_table.push_back(absent ? nullptr : device_blocks.back()->as<float>());
    }
  }
  PagedAttentionRows rows(const float* const* blocks, const int* table, const int* pos,
                          int n) const {
    return paged_attention_rows(shape, layer, n_head, blocks, table, pos, n);
  }
};

TEST_F(CudaKernels, PagedAttentionMatchesTheCpuReference) {
  PagedSetup s;
  s.add_sequence(1, 1, {});
  s.add_sequence(300, 2, {1});
  s.add_sequence(1100, 3, {0, 8, 9, 10, 11, 12, 13, 14, 15});  // keys 128..255: a whole tile absent
  // Decode rows of each sequence, then a prefill chunk of sequence 2.
  std::vector<int> table, pos;
  auto add_row = [&](int seq, int p) {
    table.push_back(s.seq_start[seq]);
    pos.push_back(p);
  };
  add_row(0, 0);
  add_row(1, 299);
  add_row(2, 1099);
  for (int p = 1000; p < 1040; ++p) add_row(2, p);
  const int n = static_cast<int>(pos.size());
  const auto q = random_floats(static_cast<std::size_t>(n) * s.n_head * s.shape.head_dim, 9);

  std::vector<float> want(q.size());
  paged_attention_reference(want.data(), q.data(),
                            s.rows(s.host_table.data(), table.data(), pos.data(), n));

  auto d_table = to_device(s.device_table), d_rows = to_device(table), d_pos = to_device(pos);
  auto d_q = to_device(q);
  DeviceBuffer d_out(q.size() * sizeof(float));
  const auto rows =
      s.rows(d_table->as<const float* const>(), d_rows->as<int>(), d_pos->as<int>(), n);
  CUDA_OK(paged_attention_cuda(d_out.as<float>(), d_q->as<float>(), rows, 0));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got(q.size());
  d_out.download(got.data());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << "element " << i;

  // Row 2 (sequence 2's decode row) alone gives the bits it had in the batch.
  const long row_floats = static_cast<long>(s.n_head) * s.shape.head_dim;
  auto d_one_rows = to_device(std::vector<int>{table[2]}),
       d_one_pos = to_device(std::vector<int>{pos[2]});
  const auto one =
      s.rows(d_table->as<const float* const>(), d_one_rows->as<int>(), d_one_pos->as<int>(), 1);
  CUDA_OK(paged_attention_cuda(d_out.as<float>(), d_q->as<float>() + 2 * row_floats, one, 0));
  CUDA_OK(cudaDeviceSynchronize());
  const auto alone = from_device<float>(d_out, static_cast<std::size_t>(row_floats));
  EXPECT_EQ(std::memcmp(alone.data(), got.data() + 2 * row_floats, row_floats * sizeof(float)), 0);
}

// A sliding window (nanochat's short layers): each row sees its last
// window + 1 keys only, so pages wholly before every row's window may be
// absent; within tolerance of the CPU reference, and apart from the
// unwindowed result.
TEST_F(CudaKernels, PagedAttentionWithAWindowMatchesTheCpuReference) {
  PagedSetup s;
  s.add_sequence(1100, 4,
                 {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                  17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33,
                  34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49});  // keys 0..799
  std::vector<int> table, pos;
  for (int p = 1000; p < 1100; p += 3) table.push_back(s.seq_start[0]), pos.push_back(p);
  const int n = static_cast<int>(pos.size());
  const auto q = random_floats(static_cast<std::size_t>(n) * s.n_head * s.shape.head_dim, 10);
  auto host_rows = s.rows(s.host_table.data(), table.data(), pos.data(), n);
  host_rows.window = 200;
  std::vector<float> want(q.size()), whole(q.size());
  paged_attention_reference(want.data(), q.data(), host_rows);
  host_rows.window = -1;
  paged_attention_reference(whole.data(), q.data(), host_rows);

  auto d_table = to_device(s.device_table), d_rows = to_device(table), d_pos = to_device(pos);
  auto d_q = to_device(q);
  DeviceBuffer d_out(q.size() * sizeof(float));
  auto rows = s.rows(d_table->as<const float* const>(), d_rows->as<int>(), d_pos->as<int>(), n);
  rows.window = 200;
  CUDA_OK(paged_attention_cuda(d_out.as<float>(), d_q->as<float>(), rows, 0));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got(q.size());
  d_out.download(got.data());
  double apart = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << "element " << i;
    apart = std::max(apart, std::fabs(static_cast<double>(got[i]) - whole[i]));
  }
  EXPECT_GT(apart, 1e-3) << "the window changed nothing";
}

// The rows' keys and values land where the CPU reference puts them: a decode
// row of each sequence and a prefill run of sequence 2, from qkv-shaped rows.
TEST_F(CudaKernels, KvWriteRowsGivesTheCpuBlocks) {
  PagedSetup s;
  s.add_sequence(20, 4, {});
  s.add_sequence(300, 5, {});
  s.add_sequence(100, 6, {});
  const std::vector<int> table = {s.seq_start[0], s.seq_start[1], s.seq_start[2], s.seq_start[2],
                                  s.seq_start[2]};
  const std::vector<int> pos = {19, 299, 64, 65, 66};
  const int n = static_cast<int>(pos.size());
  const int width = s.shape.n_kv_head * s.shape.head_dim;
  const long stride = 3L * width;
  const auto qkv = random_floats(static_cast<std::size_t>(n) * stride, 7);

  std::vector<float*> host_table;
  for (auto& b : s.host_blocks) host_table.push_back(b.data());
  kv_write_rows_reference(host_table.data(), table.data(), pos.data(), n, s.shape, s.layer,
                          qkv.data() + width, qkv.data() + 2 * width, stride);
  std::vector<float*> device_table;
  for (const auto& b : s.device_blocks) device_table.push_back(b->as<float>());
  auto d_table = to_device(device_table), d_rows = to_device(table), d_pos = to_device(pos);
  auto d_qkv = to_device(qkv);
  CUDA_OK(kv_write_rows_cuda(d_table->as<float* const>(), d_rows->as<int>(), d_pos->as<int>(), n,
                             s.shape, s.layer, d_qkv->as<float>() + width,
                             d_qkv->as<float>() + 2 * width, stride, 0));
  CUDA_OK(cudaDeviceSynchronize());
  for (std::size_t b = 0; b < s.host_blocks.size(); ++b) {
    std::vector<float> got(s.host_blocks[b].size());
    s.device_blocks[b]->download(got.data());
    EXPECT_EQ(std::memcmp(got.data(), s.host_blocks[b].data(), got.size() * sizeof(float)), 0)
        << "block " << b;
  }
  // It wrote: position 299's key element 0 is row 1's.
  EXPECT_EQ(s.host_blocks[s.seq_start[1] + 299 / s.shape.page_size]
                         [kv_key_index(s.shape, s.layer, 0, 299 % s.shape.page_size)],
            qkv[stride + width]);
}

// The launchers check shapes before touching the device, so this runs anywhere.
TEST(CudaKernelsLaunch, BadShapesAreRejectedBeforeLaunch) {
  PagedAttentionRows rows;
  rows.n_rows = 1;
  rows.n_head = 6;
  rows.n_kv_head = 4;  // 6 % 4 != 0
  rows.head_dim = 64;
  rows.page_size = 16;
  EXPECT_EQ(paged_attention_cuda(nullptr, nullptr, rows, 0), cudaErrorInvalidValue);
  rows.n_kv_head = 2;
  rows.head_dim = kAttentionMaxHeadDim + 1;
  EXPECT_EQ(paged_attention_cuda(nullptr, nullptr, rows, 0), cudaErrorInvalidValue);
  EXPECT_EQ(kv_write_rows_cuda(nullptr, nullptr, nullptr, 1, KvShape{2, 2, 64, 16}, 2, nullptr,
                               nullptr, 256, 0),
            cudaErrorInvalidValue);  // layer 2 of 2
  EXPECT_EQ(kv_write_rows_cuda(nullptr, nullptr, nullptr, 1, KvShape{2, 2, 64, 16}, 0, nullptr,
                               nullptr, 127, 0),
            cudaErrorInvalidValue);  // rows overlap
  EXPECT_EQ(block_gather_cuda(nullptr, nullptr, 1, 24, 0), cudaErrorInvalidValue);
  EXPECT_EQ(block_scatter_cuda(nullptr, nullptr, -1, 32, 0), cudaErrorInvalidValue);
  EXPECT_EQ(quantize_blocks_cuda(nullptr, nullptr, 1, KvShape{0, 1, 1, 1}, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(quantize_blocks_cuda(nullptr, nullptr, 0, KvShape{1, 1, 1, 1}, 0), cudaSuccess);
}

}  // namespace
}  // namespace kvtier::kernels

// What a GPU forward does around its kernels: check a batch against what
// only the GPU refuses, stage the batch's rows and block tables on the
// device, and copy a model's weights up once. Internal to engine/cuda.
// The nanochat forward uses these; CudaModel (GPT-2) still has its own
// copies of the same steps, and moves onto these in the session whose GPU
// run checks the move (CUDA code lands only once it has run on a GPU).
//
// Thread-safety: a CudaBatch belongs to one forward object; one thread at a
// time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <expected>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/cuda/device_array.h"
#include "engine/model/model.h"
#include "tiers/block_pool.h"

namespace kvtier {

// A tensor for upload_tensors: `floats` floats at `host` (null: absent, and
// *device stays null), whose device address is written to *device.
struct DeviceTensor {
  const float* host;
  std::size_t floats;
  const float** device;
};

// Copies the tensors into one allocation of `into`, each on a 256-byte
// boundary, in order, and returns its bytes; `after_each` (may be empty)
// runs after each copy has left host memory (the nanochat forward drops the
// mapped file's pages there). Fails with the runtime's message.
std::expected<std::size_t, std::string> upload_tensors(std::span<const DeviceTensor> tensors,
                                                       DeviceArray<float>& into,
                                                       const std::function<void()>& after_each);

class CudaBatch {
 public:
  // The batches the GPU forwards refuse beyond the model's own check: one
  // that asks for attention scores (not gathered on the GPU), a pool whose
  // blocks are not device memory.
  static std::expected<void, std::string> check(std::span<const Model::Chunk> chunks,
                                                const tiers::BlockPool& pool);

  // The chunks' rows in chunk order, each with its token, the token before
  // it (Chunk::previous_token for a chunk's first row, -1 at position 0),
  // its position and its chunk's block table (null for evicted pages), on
  // the device, enqueued on `stream`; the host copies stay valid until the
  // next call, which must not come before the stream has used these.
  std::expected<void, std::string> stage(std::span<const Model::Chunk> chunks,
                                         tiers::BlockPool& pool, cudaStream_t stream);

  int rows() const { return static_cast<int>(tokens_.size()); }
  // The rows that want logits, in order.
  const std::vector<int>& logit_rows() const { return logit_rows_; }
  const int* tokens() const { return d_tokens_.data; }
  const int* previous() const { return d_previous_.data; }
  const int* positions() const { return d_positions_.data; }
  // Per row, the index in blocks() of its block 0.
  const int* row_table() const { return d_row_table_.data; }
  float* const* blocks() const { return d_blocks_.data; }

 private:
  std::vector<int> tokens_, previous_, positions_, row_table_, logit_rows_;
  std::vector<float*> blocks_;
  DeviceArray<int> d_tokens_, d_previous_, d_positions_, d_row_table_;
  DeviceArray<float*> d_blocks_;
};

}  // namespace kvtier

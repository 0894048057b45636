// nanochat's weights (engine/model/nanochat/nanochat_weights.h): F32 tensors
// read where they lie in the mapped file, the rest widened, and a model
// that holds its embedding tables a row at a time, not whole.
#include "engine/model/nanochat/nanochat_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/model/nanochat/nanochat_config.h"
#include "engine/model/nanochat/nanochat_model.h"
#include "engine/model/safetensors.h"
#include "engine/model/sequence_kv.h"
#include "tests/nanochat_test_util.h"
#include "tests/smaps.h"
#include "tests/test_util.h"
#include "tiers/block_pool.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using nanochat_test::NanochatFolder;

// Every tensor of the file, as the weights bound it: (name, pointer, floats).
struct Bound {
  const char* name;
  const float* ptr;
  std::size_t floats;
};
std::vector<Bound> bound(const NanochatWeights& w, const NanochatConfig& c) {
  const std::size_t C = c.n_embd, KV = c.kv_dim(), Vp = w.padded_vocab();
  std::vector<Bound> out = {{"wte", w.wte(), Vp * C}, {"lm_head", w.lm_head(), Vp * C}};
  for (int i = 0; i < c.n_layer; ++i) {
    const NanochatLayerWeights& l = w.layer(i);
    out.push_back({"c_q", l.c_q, C * C});
    out.push_back({"mlp_proj", l.mlp_proj, 4 * C * C});
    if (l.value_embed != nullptr) out.push_back({"value_embed", l.value_embed, Vp * KV});
  }
  return out;
}

TEST(NanochatWeightsTest, F32IsReadInPlaceAndMisalignedDataIsWidenedToTheSameValues) {
  const NanochatFolder folder({5, 2});
  const fs::path file = folder.path() / "model.safetensors";
  auto config = NanochatConfig::load(folder.path() / "config.json");
  ASSERT_TRUE(config.has_value()) << config.error();
  auto aligned = NanochatWeights::load(*config, file);
  ASSERT_TRUE(aligned.has_value()) << aligned.error();
  const std::vector<Bound> in_place = bound(*aligned, *config);
  ASSERT_GT(in_place.size(), 10u);
  for (const Bound& b : in_place) {
    SCOPED_TRACE(b.name);
    EXPECT_TRUE(test_util::in_file_mapping(b.ptr, file)) << "copied, not mapped";
  }

  // The same tensors, their data 2 bytes off a float's alignment: copied out,
  // bit for bit.
  auto source = SafetensorsFile::open(file);
  ASSERT_TRUE(source.has_value()) << source.error();
  std::vector<test_util::Tensor> tensors;
  for (const std::string& name : source->names()) {
    const SafetensorsTensor* t = source->find(name);
    tensors.push_back(
        {name, t->dtype, t->shape, std::string(reinterpret_cast<const char*>(t->data), t->bytes)});
  }
  const test_util::TempDir dir;
  const fs::path shifted =
      test_util::write_safetensors(dir.path() / "model.safetensors", tensors, {.misalign = 2});
  auto widened = NanochatWeights::load(*config, shifted);
  ASSERT_TRUE(widened.has_value()) << widened.error();
  const std::vector<Bound> copied = bound(*widened, *config);
  ASSERT_EQ(copied.size(), in_place.size());
  for (std::size_t i = 0; i < copied.size(); ++i) {
    SCOPED_TRACE(copied[i].name);
    EXPECT_FALSE(test_util::in_file_mapping(copied[i].ptr, shifted));
    EXPECT_EQ(std::memcmp(copied[i].ptr, in_place[i].ptr, copied[i].floats * sizeof(float)), 0);
  }
}

// Packing reads every matrix and the fingerprint every tensor, a forward
// every embedding row it needs; none leaves the file resident, so a large
// model's embedding tables cost no resident memory; what is read after the
// release is the same bytes.
TEST(NanochatWeightsTest, AModelLeavesTheFileOutOfItsResidentSetAndReadsTheSameBytes) {
  const NanochatFolder folder({5, 2}, 256);
  const fs::path file = folder.path() / "model.safetensors";
  const long file_kb = static_cast<long>(fs::file_size(file) / 1024);
  auto model = NanochatModel::load(folder.path());
  ASSERT_TRUE(model.has_value()) << model.error();
  const float* wte = model->weights().wte();
  ASSERT_TRUE(test_util::in_file_mapping(wte, file));
  const long after_packing = test_util::resident_kb_of_mapping(wte);
  ASSERT_GE(after_packing, 0) << "the mapping is not in /proc/self/smaps";
  EXPECT_LT(after_packing, file_kb / 8) << "file " << file_kb << " kB";

  const std::uint64_t fingerprint = model->fingerprint(16);
  EXPECT_LT(test_util::resident_kb_of_mapping(wte), file_kb / 8)
      << "fingerprint() left the file resident";

  // A forward over every token id reads every embedding row, from the file.
  const int V = model->config().vocab_size;
  std::vector<int> tokens(V);
  for (int i = 0; i < V; ++i) tokens[i] = (i * 7) % V;
  tiers::BlockPool pool(model->kv_layout(16).block_bytes(), V / 16 + 2);
  SequenceKv kv(16);
  ASSERT_TRUE(kv.reserve(pool, V));
  const Model::Chunk chunk{&kv, tokens, false};
  ASSERT_TRUE(model->forward(std::span(&chunk, 1), pool).has_value());
  EXPECT_LT(test_util::resident_kb_of_mapping(wte), file_kb / 8)
      << "looking rows up left the tables resident";
  kv.release(pool);
  auto again = NanochatModel::load(folder.path());
  ASSERT_TRUE(again.has_value()) << again.error();
  EXPECT_EQ(again->fingerprint(16), fingerprint);
}

}  // namespace
}  // namespace kvtier

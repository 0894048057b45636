// The batched paged-attention reference (kernels/paged_attention.h, the CUDA
// kernel's CPU twin) against attention_row_reference (double accumulation):
// prefill rows and decode rows, several tiles, grouped KV heads, absent pages
// (a whole tile of them too), and rows that give the same bits alone or batched.
#include "kernels/paged_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kv_shape.h"

namespace kvtier::kernels {
namespace {

constexpr int kLayer = 1;                // the layer attended (of 2): offsets are exercised
constexpr KvShape kShape{2, 2, 32, 16};  // L, Hkv, D, P
constexpr int kHeads = 4;                // two query heads per KV head

// One sequence's KV: random keys and values for positions 0 .. n-1.
struct Sequence {
  std::vector<std::vector<float>> storage;
  std::vector<float*> blocks;
  PagedKv view() const {
    PagedKv v;
    v.blocks = blocks.data();
    v.k_offset = kShape.k_offset(kLayer);
    v.v_offset = kShape.v_offset(kLayer);
    v.page_size = kShape.page_size;
    v.n_kv_head = kShape.n_kv_head;
    v.head_dim = kShape.head_dim;
    return v;
  }
};

Sequence random_sequence(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Sequence s;
  const int n_blocks = (n + kShape.page_size - 1) / kShape.page_size;
  s.storage.assign(n_blocks, std::vector<float>(kShape.floats_per_block()));
  for (auto& b : s.storage) s.blocks.push_back(b.data());
  const int width = kShape.n_kv_head * kShape.head_dim;
  std::vector<float> k(width), v(width);
  for (int t = 0; t < n; ++t) {
    for (auto& x : k) x = 2.0f * normal(rng);
    for (auto& x : v) x = normal(rng);
    kv_write(s.view(), t, k.data(), v.data());
  }
  return s;
}

std::vector<float> random_queries(int rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(rows) * kHeads * kShape.head_dim);
  for (auto& x : q) x = normal(rng);
  return q;
}

// The rows (sequence index, position) over the given sequences.
struct Batch {
  std::vector<const float*> blocks;
  std::vector<int> table, pos;
  PagedAttentionRows rows() const {
    return paged_attention_rows(kShape, kLayer, kHeads, blocks.data(), table.data(), pos.data(),
                                static_cast<int>(pos.size()));
  }
};

Batch batch_of(const std::vector<const Sequence*>& seqs,
               const std::vector<std::pair<int, int>>& rows) {
  Batch b;
  std::vector<int> start;
  for (const Sequence* s : seqs) {
    start.push_back(static_cast<int>(b.blocks.size()));
    b.blocks.insert(b.blocks.end(), s->blocks.begin(), s->blocks.end());
  }
  for (auto [seq, pos] : rows) {
    b.table.push_back(start[seq]);
    b.pos.push_back(pos);
  }
  return b;
}

// Every (row, head) of out within tolerance of attention_row_reference.
void expect_matches_row_reference(const std::vector<float>& out, const std::vector<float>& q,
                                  const std::vector<const Sequence*>& seqs,
                                  const std::vector<std::pair<int, int>>& rows) {
  const int D = kShape.head_dim, group = kHeads / kShape.n_kv_head;
  std::vector<float> ref(D);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < kHeads; ++h) {
      const long off = (static_cast<long>(r) * kHeads + h) * D;
      attention_row_reference(ref.data(), q.data() + off, rows[r].second,
                              seqs[rows[r].first]->view(), h / group);
      for (int d = 0; d < D; ++d)
        ASSERT_NEAR(out[off + d], ref[d], 1e-5 + 1e-5 * std::fabs(ref[d]))
            << "row " << r << " (pos " << rows[r].second << ") head " << h << " dim " << d;
    }
}

TEST(PagedAttention, PrefillRowsMatchRowReferenceAcrossTiles) {
  const int n = 300;  // three tiles of keys for the last rows
  const Sequence seq = random_sequence(n, 1);
  std::vector<std::pair<int, int>> rows;
  for (int t = 0; t < n; ++t) rows.push_back({0, t});
  const Batch b = batch_of({&seq}, rows);
  const auto q = random_queries(n, 2);
  std::vector<float> out(q.size(), NAN);
  paged_attention_reference(out.data(), q.data(), b.rows());
  expect_matches_row_reference(out, q, {&seq}, rows);
}

TEST(PagedAttention, DecodeBatchMatchesRowReferenceAndEachRowAlone) {
  const Sequence a = random_sequence(1, 3), b = random_sequence(129, 4),
                 c = random_sequence(520, 5);
  const std::vector<std::pair<int, int>> rows = {{0, 0}, {1, 128}, {2, 519}, {2, 255}};
  const Batch batch = batch_of({&a, &b, &c}, rows);
  const auto q = random_queries(static_cast<int>(rows.size()), 6);
  std::vector<float> out(q.size(), NAN);
  paged_attention_reference(out.data(), q.data(), batch.rows());
  expect_matches_row_reference(out, q, {&a, &b, &c}, rows);
  // Alone, each row gives the same bits as in the batch.
  const long row_floats = static_cast<long>(kHeads) * kShape.head_dim;
  const std::vector<const Sequence*> seqs = {&a, &b, &c};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Batch alone = batch_of({seqs[rows[r].first]}, {{0, rows[r].second}});
    std::vector<float> one(row_floats, NAN);
    paged_attention_reference(one.data(), q.data() + r * row_floats, alone.rows());
    EXPECT_EQ(std::memcmp(one.data(), out.data() + r * row_floats, row_floats * sizeof(float)), 0)
        << "row " << r;
  }
}

TEST(PagedAttention, AbsentPagesAreSkippedLikeTheRowReference) {
  const int n = 400;
  Sequence seq = random_sequence(n, 7);
  // Page 1, and pages 8..15 (keys 128..255: one whole tile), are gone.
  seq.blocks[1] = nullptr;
  for (int p = 8; p < 16; ++p) seq.blocks[p] = nullptr;
  const std::vector<std::pair<int, int>> rows = {{0, 5}, {0, 40}, {0, 127}, {0, 256}, {0, 399}};
  const Batch b = batch_of({&seq}, rows);
  const auto q = random_queries(static_cast<int>(rows.size()), 8);
  std::vector<float> out(q.size(), NAN);
  paged_attention_reference(out.data(), q.data(), b.rows());
  expect_matches_row_reference(out, q, {&seq}, rows);
}

TEST(PagedAttention, AgreesWithTheCpuFastPath) {
  const int n = 200;
  const Sequence seq = random_sequence(n, 9);
  std::vector<std::pair<int, int>> rows;
  for (int t = 0; t < n; ++t) rows.push_back({0, t});
  const Batch b = batch_of({&seq}, rows);
  const auto q = random_queries(n, 10);
  std::vector<float> out(q.size(), NAN);
  paged_attention_reference(out.data(), q.data(), b.rows());
  const int D = kShape.head_dim, group = kHeads / kShape.n_kv_head;
  const long stride = static_cast<long>(kHeads) * D;
  std::vector<float> fast(q.size()), scratch(static_cast<std::size_t>(n) * (n + 1));
  for (int h = 0; h < kHeads; ++h)
    attention_rows(fast.data() + h * D, stride, q.data() + h * D, stride, n, 0, seq.view(),
                   h / group, scratch.data());
  for (std::size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(out[i], fast[i], 1e-5 + 1e-5 * std::fabs(fast[i])) << i;
}

// The rows' writer puts each element where kv_write() puts it, row by row.
TEST(PagedAttention, KvWriteRowsPutsEachRowWhereKvWriteDoes) {
  const int width = kShape.n_kv_head * kShape.head_dim, stride = 3 * width;
  Sequence a = random_sequence(40, 11), b = random_sequence(40, 12);
  Sequence a2 = a, b2 = b;  // the same blocks again, for kv_write
  for (std::size_t i = 0; i < a.blocks.size(); ++i) a2.blocks[i] = a2.storage[i].data();
  for (std::size_t i = 0; i < b.blocks.size(); ++i) b2.blocks[i] = b2.storage[i].data();
  // Rows: positions 17..19 of a, 5 of b (the other columns of a row are q).
  const std::vector<int> pos = {17, 18, 19, 5};
  std::vector<float*> table(a.blocks);
  table.insert(table.end(), b.blocks.begin(), b.blocks.end());
  const int b_start = static_cast<int>(a.blocks.size());
  const std::vector<int> row_table = {0, 0, 0, b_start};
  std::vector<float> qkv(4 * stride);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : qkv) x = normal(rng);
  kv_write_rows_reference(table.data(), row_table.data(), pos.data(), 4, kShape, kLayer,
                          qkv.data() + width, qkv.data() + 2 * width, stride);
  for (int r = 0; r < 4; ++r) {
    Sequence& twin = r < 3 ? a2 : b2;
    PagedKv view = twin.view();
    kv_write(view, pos[r], qkv.data() + r * stride + width, qkv.data() + r * stride + 2 * width);
  }
  for (std::size_t i = 0; i < a.storage.size(); ++i) EXPECT_EQ(a.storage[i], a2.storage[i]) << i;
  for (std::size_t i = 0; i < b.storage.size(); ++i) EXPECT_EQ(b.storage[i], b2.storage[i]) << i;
  // And it wrote something: position 17 of a now holds row 0's key.
  EXPECT_EQ(a.storage[1][kv_key_index(kShape, kLayer, 0, 1)], qkv[width]);
}

}  // namespace
}  // namespace kvtier::kernels

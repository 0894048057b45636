#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace kvtier::kernels {
namespace {

// A sequence's pages for one layer, filled with random keys and values.
struct Pages {
  Pages(int positions, int page_size, int n_kv_head, int head_dim, unsigned seed) {
    const long half = static_cast<long>(n_kv_head) * head_dim * page_size;
    const int blocks = (positions + page_size - 1) / page_size;
    storage.assign(blocks * 2 * half, -999.0f);  // poison: unwritten slots must never be read
    for (int b = 0; b < blocks; ++b) bases.push_back(storage.data() + b * 2 * half);
    view = {bases.data(), 0, half, page_size, n_kv_head, head_dim};
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::vector<float> k(n_kv_head * head_dim), v(k.size());
    for (int pos = 0; pos < positions; ++pos) {
      for (auto& x : k) x = normal(rng);
      for (auto& x : v) x = normal(rng);
      kv_write(view, pos, k.data(), v.data());
    }
  }
  std::vector<float> storage;
  std::vector<float*> bases;
  PagedKv view;
};

TEST(Attention, RowMatchesReferenceForEveryPositionAndPageSize) {
  for (int page_size : {16, 5, 1}) {
    for (int head_dim : {64, 24}) {
      const int n = 70, heads = 3;
      Pages pages(n, page_size, heads, head_dim, 7 + page_size);
      std::mt19937 rng(3);
      std::normal_distribution<float> normal;
      std::vector<float> q(head_dim), fast(head_dim), ref(head_dim), scores(n);
      for (int pos : {0, 1, page_size - 1, page_size, 33, n - 1}) {
        if (pos < 0) continue;
        for (int h = 0; h < heads; ++h) {
          for (auto& x : q) x = normal(rng);
          attention_row(fast.data(), q.data(), pos, pages.view, h, scores.data());
          attention_row_reference(ref.data(), q.data(), pos, pages.view, h);
          for (int d = 0; d < head_dim; ++d)
            ASSERT_NEAR(fast[d], ref[d], 2e-5f)
                << "page " << page_size << " D " << head_dim << " pos " << pos << " head " << h;
        }
      }
    }
  }
}

TEST(Attention, PositionZeroReturnsItsOwnValue) {
  Pages pages(1, 16, 2, 8, 11);
  std::vector<float> q(8, 0.5f), out(8), scores(1);
  attention_row(out.data(), q.data(), 0, pages.view, 1, scores.data());
  const float* v = pages.bases[0] + pages.view.v_offset + 1 * 16 * 8;  // head 1, slot 0
  for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(out[d], v[d]);
}

TEST(Attention, HeadsReadOnlyTheirOwnKeys) {
  Pages pages(20, 16, 2, 8, 5);
  std::vector<float> q(8, 1.0f), before(8), after(8), scores(20);
  attention_row(before.data(), q.data(), 19, pages.view, 0, scores.data());
  // Overwrite head 1 everywhere; head 0's answer must not move.
  for (int pos = 0; pos < 20; ++pos) {
    std::vector<float> kk(16), vv(16);
    for (int d = 0; d < 8; ++d) {
      kk[d] = pages.bases[pos / 16][(d * 16) + pos % 16];
      vv[d] = pages.bases[pos / 16][pages.view.v_offset + (pos % 16) * 8 + d];
      kk[8 + d] = 42.0f;
      vv[8 + d] = 42.0f;
    }
    kv_write(pages.view, pos, kk.data(), vv.data());
  }
  attention_row(after.data(), q.data(), 19, pages.view, 0, scores.data());
  EXPECT_EQ(0, std::memcmp(before.data(), after.data(), sizeof(float) * 8));
}

}  // namespace
}  // namespace kvtier::kernels

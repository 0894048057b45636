// The input embedding (kernels/embedding.h): each row is its token's row of
// wte plus its position's row of wpe, whatever the other rows are.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::kernels {
namespace {

// wte[v][i] = v + i / 1000, wpe[t][i] = 100 t: every sum is exact.
struct Tables {
  int V = 7, T = 5, C = 3;
  std::vector<float> wte, wpe;
  Tables() {
    for (int v = 0; v < V; ++v)
      for (int i = 0; i < C; ++i) wte.push_back(static_cast<float>(v) + i / 1000.0f);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < C; ++i) wpe.push_back(100.0f * t);
  }
};

TEST(Embedding, RowIsTokenRowPlusPositionRow) {
  const Tables tab;
  const std::vector<int> tokens = {3, 0, 6, 3}, positions = {0, 4, 2, 1};
  const int M = static_cast<int>(tokens.size());
  std::vector<float> out(static_cast<std::size_t>(M) * tab.C, -1.0f);
  embedding(out.data(), tokens.data(), positions.data(), tab.wte.data(), tab.wpe.data(), M, tab.C);
  for (int m = 0; m < M; ++m)
    for (int i = 0; i < tab.C; ++i)
      EXPECT_EQ(out[m * tab.C + i],
                tab.wte[tokens[m] * tab.C + i] + tab.wpe[positions[m] * tab.C + i])
          << "row " << m << " element " << i;
  EXPECT_EQ(out[2 * tab.C + 1], 6.001f + 200.0f);
}

TEST(Embedding, RowAloneEqualsRowInBatch) {
  const Tables tab;
  const std::vector<int> tokens = {1, 2, 5}, positions = {3, 3, 0};
  std::vector<float> batch(3 * tab.C), one(tab.C);
  embedding(batch.data(), tokens.data(), positions.data(), tab.wte.data(), tab.wpe.data(), 3,
            tab.C);
  embedding(one.data(), tokens.data() + 2, positions.data() + 2, tab.wte.data(), tab.wpe.data(), 1,
            tab.C);
  EXPECT_EQ(one, std::vector<float>(batch.begin() + 2 * tab.C, batch.end()));
}

TEST(Embedding, NoRowsWritesNothing) {
  const Tables tab;
  float out = -1.0f;
  embedding(&out, nullptr, nullptr, tab.wte.data(), tab.wpe.data(), 0, tab.C);
  EXPECT_EQ(out, -1.0f);
}

}  // namespace
}  // namespace kvtier::kernels

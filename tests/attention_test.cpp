#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
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
      std::vector<float> q(head_dim), fast(head_dim), ref(head_dim), scores(n + 1);
      for (int pos : {0, 1, page_size - 1, page_size, 33, n - 1}) {
        if (pos < 0) continue;
        for (int h = 0; h < heads; ++h) {
          for (auto& x : q) x = normal(rng);
          attention_rows(fast.data(), 0, q.data(), 0, 1, pos, pages.view, h, scores.data());
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
  std::vector<float> q(8, 0.5f), out(8), scores(2);
  attention_rows(out.data(), 0, q.data(), 0, 1, 0, pages.view, 1, scores.data());
  const float* v = pages.bases[0] + pages.view.v_offset + 1 * 16 * 8;  // head 1, slot 0
  for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(out[d], v[d]);
}

TEST(Attention, HeadsReadOnlyTheirOwnKeys) {
  Pages pages(20, 16, 2, 8, 5);
  std::vector<float> q(8, 1.0f), before(8), after(8), scores(21);
  attention_rows(before.data(), 0, q.data(), 0, 1, 19, pages.view, 0, scores.data());
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
  attention_rows(after.data(), 0, q.data(), 0, 1, 19, pages.view, 0, scores.data());
  EXPECT_EQ(0, std::memcmp(before.data(), after.data(), sizeof(float) * 8));
}

// A tile of consecutive queries gives each row the bits it gets alone, at any
// tile size and any starting position (page boundaries included).
TEST(Attention, TileRowsMatchSingleRowsBitForBit) {
  const int n = 53, heads = 2;
  // D = 64 with 16-key pages takes the register-blocked paths; the others
  // the generic loops.
  for (auto [page_size, D] : {std::pair{16, 64}, {16, 16}, {3, 64}, {3, 16}}) {
    Pages pages(n, page_size, heads, D, 21);
    std::mt19937 rng(8);
    std::normal_distribution<float> normal;
    std::vector<float> q(static_cast<std::size_t>(n) * D);
    for (auto& x : q) x = normal(rng);
    for (int first : {0, 5, 15, 16, 40}) {
      for (int rows : {1, 2, 4, 7, 13, 16, 20, 37}) {
        if (first + rows > n) continue;
        std::vector<float> tile(static_cast<std::size_t>(rows) * D), one(D);
        std::vector<float> scratch(static_cast<std::size_t>(rows) * (first + rows + 1));
        attention_rows(tile.data(), D, q.data() + first * D, D, rows, first, pages.view, 1,
                       scratch.data());
        for (int r = 0; r < rows; ++r) {
          attention_rows(one.data(), 0, q.data() + (first + r) * D, 0, 1, first + r, pages.view, 1,
                         scratch.data());
          ASSERT_EQ(0, std::memcmp(one.data(), tile.data() + r * D, sizeof(float) * D))
              << "page " << page_size << " D " << D << " first " << first << " rows " << rows
              << " row " << r;
          std::vector<float> ref(D);
          attention_row_reference(ref.data(), q.data() + (first + r) * D, first + r, pages.view, 1);
          for (int d = 0; d < D; ++d) ASSERT_NEAR(tile[r * D + d], ref[d], 2e-5f);
        }
      }
    }
  }
}

// Queries of several sequences whose tables share their first pages (as
// forks of one prompt do) get, run together, the bits each gets alone, and
// the same key scores: for both paths, more queries than one pass takes, a
// private absent page, and a shared absent page.
TEST(Attention, QueriesSharingPagesGetTheBitsEachGetsAlone) {
  const int heads = 2, shared_pages = 4, own_pages = 3, n = 19;
  for (auto [P, D] : {std::pair{16, 64}, {16, 24}, {5, 64}, {3, 16}}) {
    for (bool shared_hole : {false, true}) {
      // Every page of `store` is full of random keys and values; tables are
      // made of its pages: the shared ones first, then each sequence's own.
      Pages store((shared_pages + n * own_pages) * P, P, heads, D, 41);
      std::vector<std::vector<float*>> tables(n);
      std::vector<AttentionQuery> queries(n);
      std::mt19937 rng(P * 100 + D);
      std::normal_distribution<float> normal;
      std::vector<float> q(static_cast<std::size_t>(n) * D), together(q.size());
      for (auto& x : q) x = normal(rng);
      std::vector<std::vector<AttentionScore>> scores(n);
      for (int s = 0; s < n; ++s) {
        for (int i = 0; i < shared_pages; ++i) tables[s].push_back(store.bases[i]);
        for (int j = 0; j < own_pages; ++j)
          tables[s].push_back(store.bases[shared_pages + s * own_pages + j]);
        if (shared_hole) tables[s][1] = nullptr;
        int first_own = shared_pages;  // the first page its position may fall on
        if (s == 3) tables[s][first_own++] = nullptr;
        const int pos = first_own * P + static_cast<int>(rng() % ((own_pages - 1) * P));
        PagedKv view = store.view;
        view.blocks = tables[s].data();
        scores[s].assign(pos + 1, 0);
        queries[s] = {q.data() + s * D, together.data() + s * D, pos, view, scores[s].data()};
      }
      std::vector<float> scratch(static_cast<std::size_t>(n) *
                                 ((shared_pages + own_pages) * P + 1));
      attention_queries(queries.data(), n, shared_pages * P, 1, scratch.data());
      for (int s = 0; s < n; ++s) {
        std::vector<float> alone(D);
        std::vector<AttentionScore> alone_scores(scores[s].size(), 0);
        attention_rows(alone.data(), 0, queries[s].q, 0, 1, queries[s].pos, queries[s].kv, 1,
                       scratch.data(), alone_scores.data());
        ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + s * D, sizeof(float) * D))
            << "page " << P << " D " << D << " shared hole " << shared_hole << " query " << s;
        EXPECT_EQ(alone_scores, scores[s]) << "query " << s;
        std::vector<float> ref(D);
        attention_row_reference(ref.data(), queries[s].q, queries[s].pos, queries[s].kv, 1);
        for (int d = 0; d < D; ++d) ASSERT_NEAR(together[s * D + d], ref[d], 2e-5f);
      }
    }
  }
}

// Pages with a null base are absent (evicted): every row skips their
// positions, as the reference does, for the register-blocked and generic
// paths, single rows and tiles.
TEST(Attention, AbsentPagesAreSkippedLikeTheReference) {
  const int n = 70, heads = 2;
  for (auto [page_size, D] : {std::pair{16, 64}, {16, 24}, {5, 64}, {5, 24}}) {
    Pages pages(n, page_size, heads, D, 31);
    // Drop pages 0, 2 and 3 (a run of two) — never the last, which the
    // queries below live in.
    for (int b : {0, 2, 3}) pages.bases[b] = nullptr;
    std::mt19937 rng(4);
    std::normal_distribution<float> normal;
    std::vector<float> q(static_cast<std::size_t>(n) * D);
    for (auto& x : q) x = normal(rng);
    const int last_page_start = (n - 1) / page_size * page_size;
    for (int first : {last_page_start, n - 3}) {
      const int rows = n - first;
      std::vector<float> tile(static_cast<std::size_t>(rows) * D), one(D), ref(D);
      std::vector<float> scratch(static_cast<std::size_t>(rows) * (n + 1));
      attention_rows(tile.data(), D, q.data() + first * D, D, rows, first, pages.view, 1,
                     scratch.data());
      for (int r = 0; r < rows; ++r) {
        attention_rows(one.data(), 0, q.data() + (first + r) * D, 0, 1, first + r, pages.view, 1,
                       scratch.data());
        ASSERT_EQ(0, std::memcmp(one.data(), tile.data() + r * D, sizeof(float) * D));
        attention_row_reference(ref.data(), q.data() + (first + r) * D, first + r, pages.view, 1);
        for (int d = 0; d < D; ++d)
          ASSERT_NEAR(one[d], ref[d], 2e-5f) << "page " << page_size << " D " << D << " row " << r;
      }
    }
  }
}

// Skipping is exact: a sequence with holes gives the bits of the sequence
// that never had those pages (the present ones moved together).
TEST(Attention, AbsentPagesGiveTheBitsOfTheCompactedSequence) {
  const int n = 70, P = 16, heads = 2;
  for (int D : {64, 24}) {
    Pages holes(n, P, heads, D, 17);
    holes.bases[1] = holes.bases[2] = nullptr;  // positions 16..47 gone
    // The compacted copy: pages 0, 3, 4 of `holes` as pages 0, 1, 2.
    Pages compact(n - 32, P, heads, D, 99);
    for (auto [to, from] : {std::pair{0, 0}, {1, 3}, {2, 4}})
      std::memcpy(compact.bases[to], holes.bases[from], sizeof(float) * 2 * heads * D * P);
    std::mt19937 rng(6);
    std::normal_distribution<float> normal;
    const int rows = 6, first = n - rows;
    std::vector<float> q(static_cast<std::size_t>(rows) * D);
    for (auto& x : q) x = normal(rng);
    std::vector<float> a(q.size()), b(q.size()), scratch(static_cast<std::size_t>(rows) * (n + 1));
    attention_rows(a.data(), D, q.data(), D, rows, first, holes.view, 0, scratch.data());
    attention_rows(b.data(), D, q.data(), D, rows, first - 32, compact.view, 0, scratch.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size())) << "D " << D;
  }
}

// Asking for scores changes no output bit, and the scores are each row's
// probabilities in fixed point: the reference's within rounding, nothing on
// absent positions, and the same integers whether the rows ran as a tile or
// one at a time.
TEST(Attention, ScoresAreTheRowsProbabilitiesInFixedPoint) {
  const int n = 53, heads = 2;
  for (auto [page_size, D] : {std::pair{16, 64}, {3, 16}}) {
    Pages pages(n, page_size, heads, D, 12);
    pages.bases[1] = nullptr;
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    const int rows = 7, first = n - rows;
    std::vector<float> q(static_cast<std::size_t>(rows) * D);
    for (auto& x : q) x = normal(rng);
    std::vector<float> plain(q.size()), scored(q.size());
    std::vector<float> scratch(static_cast<std::size_t>(rows) * (n + 1));
    std::vector<AttentionScore> tile_scores(n, 0), row_scores(n, 0);
    attention_rows(plain.data(), D, q.data(), D, rows, first, pages.view, 1, scratch.data());
    attention_rows(scored.data(), D, q.data(), D, rows, first, pages.view, 1, scratch.data(),
                   tile_scores.data());
    EXPECT_EQ(0, std::memcmp(plain.data(), scored.data(), sizeof(float) * plain.size()));

    std::vector<double> expected(n, 0.0), probs(n);
    std::vector<float> out(D);
    for (int r = 0; r < rows; ++r) {
      attention_rows(out.data(), 0, q.data() + r * D, 0, 1, first + r, pages.view, 1,
                     scratch.data(), row_scores.data());
      attention_row_reference(out.data(), q.data() + r * D, first + r, pages.view, 1, probs.data());
      for (int t = 0; t <= first + r; ++t) expected[t] += probs[t];
    }
    EXPECT_EQ(tile_scores, row_scores);
    for (int t = 0; t < n; ++t) {
      if (t / page_size == 1) {
        EXPECT_EQ(tile_scores[t], 0) << "absent position " << t;
        continue;
      }
      EXPECT_NEAR(static_cast<double>(tile_scores[t]) / kScoreOne, expected[t], 1e-5)
          << "page " << page_size << " position " << t;
    }
  }
}

}  // namespace
}  // namespace kvtier::kernels

namespace kvtier::kernels {
namespace {

// A sliding window (AttentionQuery::first): keys before it count for
// nothing, as in the reference; queries with different windows run
// together get the bits each gets alone; a window of one key returns that
// key's value exactly.
TEST(Attention, AWindowSeesOnlyItsKeysTogetherOrAlone) {
  const int heads = 2, n = 9, positions = 70;
  for (auto [P, D] : {std::pair{16, 64}, {16, 24}, {5, 64}, {3, 16}}) {
    Pages pages(positions, P, heads, D, 53);
    std::mt19937 rng(P + D);
    std::normal_distribution<float> normal;
    std::vector<float> q(static_cast<std::size_t>(n) * D), together(q.size());
    for (auto& x : q) x = normal(rng);
    std::vector<AttentionQuery> queries(n);
    for (int i = 0; i < n; ++i) {
      const int pos = positions - 1 - i;
      const int window = std::vector<int>{0, 1, 5, 16, 17, 33, 60, 68, 69}[i];
      queries[i] = {q.data() + i * D, together.data() + i * D, pos, pages.view, nullptr};
      queries[i].first = std::max(0, pos - window);
    }
    std::vector<float> scratch(static_cast<std::size_t>(n) * (positions + 1));
    attention_queries(queries.data(), n, positions - n + 1, 1, scratch.data());
    for (int i = 0; i < n; ++i) {
      std::vector<float> alone(D), ref(D);
      AttentionQuery one = queries[i];
      one.out = alone.data();
      attention_queries(&one, 1, one.pos + 1, 1, scratch.data());
      ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + i * D, sizeof(float) * D))
          << "page " << P << " D " << D << " query " << i;
      attention_row_reference(ref.data(), one.q, one.pos, one.kv, 1, nullptr, one.first);
      for (int d = 0; d < D; ++d) ASSERT_NEAR(alone[d], ref[d], 2e-5f) << "query " << i;
    }
    // Window 0: the query's own value, exactly.
    const int pos = queries[0].pos;
    const float* own = pages.view.blocks[pos / P] + pages.view.v_offset +
                       static_cast<long>(1) * P * D + (pos % P) * D;
    EXPECT_EQ(0, std::memcmp(together.data(), own, sizeof(float) * D));
  }
}

// Keys before the oldest window of a call's queries are never read: NaN
// written into their keys and values changes no bit of any output (a
// windowed layer's work is its window's, and item 5 of the nanochat issue
// may leave those pages unloaded).
TEST(Attention, KeysBeforeEveryWindowAreNeverRead) {
  const int heads = 1, n = 5, positions = 200, P = 16, D = 64;
  Pages clean(positions, P, heads, D, 61), poisoned(positions, P, heads, D, 61);
  const int oldest = 100;  // every query's window starts here or later
  const std::vector<float> nan(static_cast<std::size_t>(D), std::nanf(""));
  for (int pos = 0; pos < oldest; ++pos) kv_write(poisoned.view, pos, nan.data(), nan.data());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(static_cast<std::size_t>(n) * D);
  for (auto& x : q) x = normal(rng);
  std::vector<float> want(q.size()), got(q.size());
  std::vector<float> scratch(static_cast<std::size_t>(n) * (positions + 1));
  for (Pages* pages : {&clean, &poisoned}) {
    std::vector<AttentionQuery> queries(n);
    for (int i = 0; i < n; ++i) {
      const int pos = positions - 1 - 7 * i;
      float* out = (pages == &clean ? want.data() : got.data()) + i * D;
      queries[i] = {q.data() + i * D, out, pos, pages->view, nullptr};
      queries[i].first = oldest + 3 * i;
    }
    attention_queries(queries.data(), n, positions - 7 * (n - 1), 0, scratch.data());
  }
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()));
}

}  // namespace
}  // namespace kvtier::kernels

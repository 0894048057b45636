// The H2O attention scores of one forward pass (Model::Chunk::scores),
// gathered the way every family's attention gathers them: each thread adds
// its queries' probabilities into a buffer of its own, then the buffers are
// added into the chunks' sums. The scores are integers
// (kernels::AttentionScore), so the sums do not depend on which thread
// added what, or in which order: a sequence's scores stay batch-invariant.
//
// Use: plan() once per forward, with each chunk's positions; then, inside
// the parallel region, one Buffer per thread: at(chunk, pos) is where a
// query of that chunk at that position adds (null for chunks that want no
// scores), and merge() adds the buffer into the sums (under a lock: call it
// once per thread, after the thread's last query of the layer).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/model/model.h"
#include "kernels/attention.h"

namespace kvtier {

class ScoreGather {
 public:
  // Chunk i's positions are 0 .. kv->length() + tokens.size() - 1.
  void plan(std::span<const Model::Chunk> chunks) {
    targets_.clear();
    offsets_.assign(chunks.size(), -1);
    from_.assign(chunks.size(), 0);
    positions_ = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const Model::Chunk& c = chunks[i];
      if (c.scores == nullptr) continue;
      const int positions = c.kv->length() + static_cast<int>(c.tokens.size());
      offsets_[i] = positions_;
      from_[i] = c.scores_from;
      targets_.push_back({positions_, positions, c.scores});
      positions_ += positions;
    }
  }

  class Buffer {
   public:
    explicit Buffer(const ScoreGather& gather)
        : gather_(gather), scores_(static_cast<std::size_t>(gather.positions_), 0) {}

    // Where the query at position `pos` of chunk `chunk` adds; null for a
    // chunk without scores or a row before its scores_from.
    kernels::AttentionScore* at(int chunk, int pos) {
      const auto i = static_cast<std::size_t>(chunk);
      const long offset = gather_.offsets_[i];
      return offset < 0 || pos < gather_.from_[i] ? nullptr : scores_.data() + offset;
    }

    void merge() {
      if (scores_.empty()) return;
#pragma omp critical(kvtier_attention_scores)
      for (const Target& t : gather_.targets_)
        for (int i = 0; i < t.positions; ++i) t.scores[i] += scores_[t.offset + i];
    }

   private:
    const ScoreGather& gather_;
    std::vector<kernels::AttentionScore> scores_;
  };

 private:
  struct Target {
    long offset;    // in a thread's buffer
    int positions;  // how many
    kernels::AttentionScore* scores;
  };
  std::vector<Target> targets_;
  std::vector<long> offsets_;  // per chunk; -1 without scores
  std::vector<int> from_;      // per chunk: Model::Chunk::scores_from
  long positions_ = 0;
};

}  // namespace kvtier

// Which rows of a forward pass run attention together
// (kernels::attention_queries), as every family's CPU forward groups them:
// rows that share pages, so that each shared page is read once for all of
// them. A prefill tile is up to kTileRows consecutive rows of one chunk,
// every key shared; decode rows (one-token chunks) of sequences whose
// tables start with the same pages (a shared prompt) form groups of up to
// kTileRows too, smaller where that would leave threads without work.
//
// attention_queries gives every query the bits it would have alone, so
// neither the grouping nor the thread that runs a group changes a row's
// arithmetic: a sequence's tokens stay batch- and chunk-invariant.
//
// Rows are numbered in chunk order: chunk 0's tokens, then chunk 1's, ...
// Use: plan() once per forward; groups() and rows() until the next plan().
#pragma once

#include <span>
#include <vector>

#include "engine/model/model.h"

namespace kvtier {

class AttentionGroups {
 public:
  static constexpr int kTileRows = 16;

  struct Group {
    int first;        // its rows are rows()[first .. first + count)
    int count;        // 1 .. kTileRows
    int shared_keys;  // keys [0, shared_keys) are the same pages for all its rows
  };

  // Groups the rows of `chunks` for a model of n_head query heads (the
  // heads of a group are the items threads share out) on `threads`
  // threads.
  void plan(std::span<const Model::Chunk> chunks, int n_head, int threads);

  std::span<const Group> groups() const { return groups_; }
  // Row numbers, group by group.
  std::span<const int> rows() const { return rows_; }

 private:
  void group_decode_rows(std::span<const Model::Chunk> chunks, int n_head, int threads);

  std::vector<Group> groups_;
  std::vector<int> rows_;
  std::vector<int> chunk_of_;     // per row
  std::vector<int> position_of_;  // per row
  std::vector<int> decode_rows_;
};

}  // namespace kvtier

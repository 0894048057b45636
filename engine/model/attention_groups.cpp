#include "engine/model/attention_groups.h"

#include <algorithm>
#include <climits>

namespace kvtier {

void AttentionGroups::plan(std::span<const Model::Chunk> chunks, int n_head, int threads) {
  groups_.clear();
  rows_.clear();
  chunk_of_.clear();
  position_of_.clear();
  decode_rows_.clear();
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Model::Chunk& c = chunks[i];
    const int n = static_cast<int>(c.tokens.size());
    for (int t = 0; t < n; ++t) {
      const int row = static_cast<int>(chunk_of_.size());
      chunk_of_.push_back(static_cast<int>(i));
      position_of_.push_back(c.kv->length() + t);
      if (n == 1) {
        decode_rows_.push_back(row);
        continue;
      }
      if (t % kTileRows == 0) groups_.push_back({static_cast<int>(rows_.size()), 0, 0});
      rows_.push_back(row);
      ++groups_.back().count;
      groups_.back().shared_keys = c.kv->length() + t + 1;
    }
  }
  group_decode_rows(chunks, n_head, threads);
}

// Sorted by block table, neighbours share the longest prefixes.
void AttentionGroups::group_decode_rows(std::span<const Model::Chunk> chunks, int n_head,
                                        int threads) {
  auto table = [&](int row) { return chunks[chunk_of_[row]].kv->block_ids(); };
  std::ranges::sort(decode_rows_, [&](int a, int b) {
    return std::ranges::lexicographical_compare(table(a), table(b));
  });
  // Pages at the start of two tables that are the same live block.
  auto common_pages = [&](int a, int b) {
    const auto ta = table(a), tb = table(b);
    std::size_t i = 0;
    while (i < ta.size() && i < tb.size() && ta[i] == tb[i] && ta[i] != SequenceKv::kEvictedBlock)
      ++i;
    return static_cast<int>(i);
  };
  const long spread = static_cast<long>(decode_rows_.size()) * n_head / (2L * std::max(1, threads));
  const int cap = static_cast<int>(std::clamp(spread, 1L, static_cast<long>(kTileRows)));
  for (std::size_t i = 0; i < decode_rows_.size();) {
    const int first = decode_rows_[i];
    std::size_t end = i + 1;
    int pages = INT_MAX;
    while (end < decode_rows_.size() && static_cast<int>(end - i) < cap) {
      const int common = std::min(pages, common_pages(first, decode_rows_[end]));
      if (common == 0) break;
      pages = common;
      ++end;
    }
    // A row alone shares all its keys with itself, as a tile does.
    const int shared_keys =
        end - i == 1 ? position_of_[first] + 1 : pages * chunks[chunk_of_[first]].kv->page_size();
    groups_.push_back({static_cast<int>(rows_.size()), static_cast<int>(end - i), shared_keys});
    rows_.insert(rows_.end(), decode_rows_.begin() + static_cast<long>(i),
                 decode_rows_.begin() + static_cast<long>(end));
    i = end;
  }
}

}  // namespace kvtier

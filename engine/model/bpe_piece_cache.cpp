#include "engine/model/bpe_piece_cache.h"

namespace kvtier {

std::vector<int> BpePieceCache::encode(const BpePretokenizer& pretokenizer, std::string_view text,
                                       const Merge& merge) const {
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<int> piece_ids;
  for (const std::string_view piece : pretokenizer.split(text)) {
    const bool cacheable = piece.size() <= kMaxPieceBytes;
    if (cacheable) {
      std::lock_guard lock(mu_);
      if (const auto it = ids_.find(piece); it != ids_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    piece_ids.clear();
    merge(piece, piece_ids);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    if (cacheable) {
      std::lock_guard lock(mu_);
      if (ids_.size() >= kMaxEntries) ids_.clear();
      ids_.emplace(piece, piece_ids);
    }
  }
  return ids;
}

}  // namespace kvtier

// The encode loop both byte-level BPE tokenizers share (bpe_tokenizer.h,
// tiktoken_tokenizer.h): split the text into pieces, then each piece's ids,
// from a cache of the pieces seen before or from the tokenizer's merge.
// Pieces repeat (" the", " of", ...), so caching them is most of encode's
// speed. The cache is cleared when it reaches kMaxEntries, so a long-running
// daemon's memory stays bounded; pieces longer than kMaxPieceBytes skip it.
//
// Thread-safety: encode() may be called concurrently; the cache is guarded
// by a mutex.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/bpe_pretokenizer.h"

namespace kvtier {

class BpePieceCache {
 public:
  // Appends one piece's ids to `out`.
  using Merge = std::function<void(std::string_view piece, std::vector<int>& out)>;

  // The ids of `text`, piece by piece as `pretokenizer` splits it.
  std::vector<int> encode(const BpePretokenizer& pretokenizer, std::string_view text,
                          const Merge& merge) const;

 private:
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxPieceBytes = 64;
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>>
      ids_;  // GUARDED_BY(mu_)
};

}  // namespace kvtier

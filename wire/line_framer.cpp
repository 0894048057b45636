#include "wire/line_framer.h"

namespace kvtier::wire {

std::vector<LineFramer::Item> LineFramer::feed(std::string_view bytes) {
  std::vector<Item> items;
  while (!bytes.empty()) {
    const std::size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    if (!discarding_) {
      if (partial_.size() + piece.size() > max_line_bytes_) {
        // Report at once rather than at the '\n', so the reply does not wait
        // for the end of a line that may never come.
        discarding_ = true;
        partial_.clear();
        items.push_back({{}, true});
      } else {
        partial_.append(piece);
      }
    }
    if (nl == std::string_view::npos) break;
    if (!discarding_) {
      if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
      if (!partial_.empty()) items.push_back({std::move(partial_), false});
    }
    partial_.clear();
    discarding_ = false;
    bytes.remove_prefix(nl + 1);
  }
  return items;
}

}  // namespace kvtier::wire

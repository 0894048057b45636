#include "engine/cache/cache_handles.h"

#include "engine/cache/kv_cache.h"

namespace kvtier {

PrefixLease& PrefixLease::operator=(PrefixLease&& other) noexcept {
  if (this != &other) {
    if (cache_) cache_->give_back(blocks_);
    cache_ = std::exchange(other.cache_, nullptr);
    blocks_ = std::exchange(other.blocks_, {});
    load_ = std::exchange(other.load_, {});
    served_ = std::exchange(other.served_, {});
    split_ = std::exchange(other.split_, {});
  }
  return *this;
}

PrefixLease::~PrefixLease() {
  if (cache_) cache_->give_back(blocks_);
}

SwapTicket& SwapTicket::operator=(SwapTicket&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    held_ = std::exchange(other.held_, {});
    stash_ = std::exchange(other.stash_, {});
    length_ = std::exchange(other.length_, 0);
    table_size_ = std::exchange(other.table_size_, 0);
    private_ = std::exchange(other.private_, false);
  }
  return *this;
}

SwapTicket::~SwapTicket() { reset(); }

void SwapTicket::reset() {
  if (cache_) cache_->drop(*this);
  cache_ = nullptr;
}

}  // namespace kvtier

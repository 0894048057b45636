#include "tiers/l2_store.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace kvtier::tiers {

L2Store::L2Store(std::unique_ptr<BlockPool> slots, std::function<void()> waker,
                 std::function<void(const std::string& why)> on_queue_loss)
    : slots_(std::move(slots)), mover_(std::move(waker), std::move(on_queue_loss)) {}

L2Store::~L2Store() = default;

std::uint64_t L2Store::write(const BlockKey& key, int slot, const std::byte* src, std::size_t bytes,
                             const Transfer& how) {
  return queue(key, /*is_write=*/true, slots_->data(slot), src, bytes, how, 1, 0);
}

std::uint64_t L2Store::read(const BlockKey& key, int slot, std::byte* dst, std::size_t part_bytes,
                            const Transfer& how, int parts, std::uint64_t skip) {
  return queue(key, /*is_write=*/false, dst, slots_->data(slot), part_bytes, how, parts, skip);
}

std::uint64_t L2Store::queue(const BlockKey& key, bool is_write, std::byte* dst,
                             const std::byte* src, std::size_t part_bytes, const Transfer& how,
                             int parts, std::uint64_t skip) {
  const std::uint64_t ticket = ++last_ticket_;
  Op op{.key = key,
        .is_write = is_write,
        .dst = dst,
        .src = src,
        .part_bytes = part_bytes,
        .how = &how,
        .landed = std::vector<bool>(static_cast<std::size_t>(std::max(parts, 1)))};
  for (std::size_t i = 0; i < op.landed.size() && i < 64; ++i) {
    if ((skip >> i & 1) == 0) continue;
    op.landed[i] = true;
    op.skipped_bytes += part_bytes;
  }
  Op& queued = ops_.emplace(ticket, std::move(op)).first->second;
  if (std::ranges::all_of(queued.landed, std::identity{}))
    complete(ticket, queued, StoreStatus::kOk, {});
  else
    queued_.push_back(ticket);
  return ticket;
}

void L2Store::flush() { start_queued(/*wake=*/true); }

void L2Store::start() { start_queued(/*wake=*/false); }

void L2Store::start_queued(bool wake) {
  std::size_t most_parts = 0;
  for (std::uint64_t t : queued_) most_parts = std::max(most_parts, ops_.at(t).landed.size());
  for (std::size_t i = 0; i < most_parts; ++i) {
    for (std::uint64_t t : queued_) {
      const Op& op = ops_.at(t);
      if (i >= op.landed.size() || op.landed[i]) continue;  // beyond it, or skipped
      const std::size_t offset = i * op.part_bytes;
      const std::uint64_t moved =
          mover_.start(op.dst + offset, op.src + offset, op.part_bytes, *op.how);
      pieces_[moved] = {t, static_cast<int>(i)};
    }
    // A wake-up as each round of pieces lands: the forward waits for a
    // layer of every block of its prefix at a time.
    if (wake) mover_.notify();
  }
  queued_.clear();
}

std::optional<int> L2Store::landed(std::uint64_t ticket) {
  take();
  const auto it = ops_.find(ticket);
  if (it == ops_.end() || it->second.done) return std::nullopt;
  const std::vector<bool>& landed = it->second.landed;
  return static_cast<int>(std::find(landed.begin(), landed.end(), false) - landed.begin());
}

std::vector<StoreCompletion> L2Store::poll() {
  take();
  for (const StoreCompletion& c : done_) ops_.erase(c.ticket);
  return std::exchange(done_, {});
}

bool L2Store::help() {
  flush();
  return mover_.help();
}

void L2Store::drain() {
  flush();
  mover_.drain();
}

void L2Store::take() {
  flush();
  for (const CopyCompletion& c : mover_.poll()) {
    const auto piece = pieces_.find(c.ticket);
    if (piece == pieces_.end()) continue;  // cannot happen: every move is a piece
    Op& op = ops_.at(piece->second.ticket);
    op.landed[static_cast<std::size_t>(piece->second.index)] = true;
    if (std::ranges::all_of(op.landed, std::identity{}))
      complete(piece->second.ticket, op, StoreStatus::kOk, c.latency);
    pieces_.erase(piece);
  }
  if (!mover_.queue_lost()) return;
  // A move's pieces are all on one engine: the lost queue's never land.
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (!BlockMover::on_queue(it->first)) {
      ++it;
      continue;
    }
    Op& op = ops_.at(it->second.ticket);
    if (!op.done) complete(it->second.ticket, op, StoreStatus::kIoError, {});
    it = pieces_.erase(it);
  }
  mover_.forget_lost_queue();
}

void L2Store::complete(std::uint64_t ticket, Op& op, StoreStatus status,
                       std::chrono::nanoseconds latency) {
  op.done = true;
  done_.push_back({.ticket = ticket,
                   .key = op.key,
                   .is_write = op.is_write,
                   .status = status,
                   .latency = latency,
                   .skipped_bytes = op.skipped_bytes});
}

}  // namespace kvtier::tiers

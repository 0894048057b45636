#include "tiers/block_mover.h"

namespace kvtier::tiers {

namespace {
// Marks a move started between the queue's loss and forget_lost_queue():
// never made, failed with the lost queue's moves.
constexpr std::uint64_t kNeverCopied = 1ULL << 62;
}  // namespace

BlockMover::BlockMover(std::function<void()> waker,
                       std::function<void(const std::string& why)> on_loss)
    : waker_(std::move(waker)), on_loss_(std::move(on_loss)) {}

BlockMover::~BlockMover() = default;

std::uint64_t BlockMover::start(std::byte* dst, const std::byte* src, std::size_t bytes,
                                const CopyWorker::Transfer& how) {
  if (queue_) {
    auto ticket = queue_->copy(dst, src, bytes);
    if (ticket) return *ticket | kQueueBit;
    lose_queue(ticket.error());
  }
  if (queue_lost_) return kQueueBit | kNeverCopied | ++never_copied_;
  if (!worker_) worker_ = std::make_unique<CopyWorker>(waker_);
  return worker_->copy(dst, src, how);
}

void BlockMover::notify() {
  if (queue_)
    if (auto ok = queue_->notify(); !ok) lose_queue(ok.error());
}

std::vector<CopyCompletion> BlockMover::poll() {
  std::vector<CopyCompletion> done;
  if (worker_) done = worker_->poll();
  if (queue_) {
    auto polled = queue_->poll();
    if (!polled) {
      lose_queue(polled.error());
      return done;
    }
    for (const CopyCompletion& c : *polled) done.push_back({c.ticket | kQueueBit, c.latency});
  }
  return done;
}

void BlockMover::drain() {
  if (worker_) worker_->drain();
  if (queue_)
    if (auto ok = queue_->drain(); !ok) lose_queue(ok.error());
}

void BlockMover::lose_queue(const std::string& why) {
  queue_.reset();  // waits for whatever can still end
  queue_lost_ = true;
  if (on_loss_) on_loss_(why);
}

}  // namespace kvtier::tiers

#include "tiers/copy_worker.h"

namespace kvtier::tiers {

CopyWorker::CopyWorker(std::function<void()> on_complete)
    : on_complete_(std::move(on_complete)), thread_([this] { run(); }) {}

CopyWorker::~CopyWorker() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
}

std::uint64_t CopyWorker::copy(std::byte* dst, const std::byte* src, const Transfer& transfer) {
  const std::uint64_t ticket = next_ticket_++;
  {
    std::lock_guard lock(mu_);
    jobs_.push_back({ticket, dst, src, &transfer, std::chrono::steady_clock::now()});
  }
  ++in_flight_;
  work_.notify_one();
  return ticket;
}

bool CopyWorker::help() {
  Job job{};
  {
    std::lock_guard lock(mu_);
    if (jobs_.empty()) return false;
    job = jobs_.front();
    jobs_.pop_front();
  }
  finish(job);
  return true;
}

void CopyWorker::finish(const Job& job) {
  (*job.transfer)(job.dst, job.src);
  const auto latency = std::chrono::steady_clock::now() - job.queued;
  std::lock_guard lock(mu_);
  done_.push_back({job.ticket, latency});
}

std::vector<CopyCompletion> CopyWorker::poll() {
  std::vector<CopyCompletion> out;
  {
    std::lock_guard lock(mu_);
    out.swap(done_);
  }
  in_flight_ -= out.size();
  return out;
}

void CopyWorker::drain() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

void CopyWorker::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Queued jobs are finished even when stopping: their owner counts on them.
    work_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    const Job job = jobs_.front();
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    finish(job);
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_.notify_all();
    if (on_complete_) {
      lock.unlock();
      on_complete_();
      lock.lock();
    }
  }
}

}  // namespace kvtier::tiers

// A stand-in for device memory on a machine without a GPU, for the cache's
// device-L1 paths. The real one (tiers/cuda/cuda_memory.h) runs only where a
// device is; its tests (cuda_*_test.cpp) skip here with the reason.
//
// region() is host memory that a pool reaches only through the Region's copy
// (a counting memcpy), as it would device memory: host_addressable() is
// false, so KvCache takes its device-L1 paths, while the CPU forward can still
// compute on it. With link, it also offers what cuda_device_region offers
// (DeviceLink): host memory for L2 and a copy queue, here a CopyWorker doing
// plain copies on its thread, which a test can make fail as a lost device
// fails a CUDA stream (every poll() and drain() from then on); and the
// device's failure, which a test can set.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "tiers/block_pool.h"
#include "tiers/copy_queue.h"
#include "tiers/copy_worker.h"

namespace kvtier::test_util {

class StandInDevice {
 public:
  // Counters, updated from the copying threads.
  std::atomic<long> copies = 0;    // Region::copy calls (the pool's own copies)
  std::atomic<long> queued = 0;    // copies the copy queue took
  std::atomic<long> notifies = 0;  // wake-ups asked of the copy queue (notify())
  // The copy queue is lost once it has taken this many copies: from then on
  // its poll() and drain() fail (its copies still land: the cache must
  // throw them away all the same). Negative: never.
  long lose_after = -1;
  // The device has failed (DeviceLink::failure says so while it is set).
  std::atomic<bool> failed = false;

  tiers::Region region(std::size_t bytes, bool with_link) {
    tiers::Region r = host_region(bytes);
    r.copy = [this](std::byte* dst, const std::byte* src, std::size_t n) {
      ++copies;
      std::memcpy(dst, src, n);
    };
    if (with_link) {
      auto link = std::make_shared<tiers::DeviceLink>();
      link->host_memory = [](std::size_t n) -> std::expected<tiers::Region, std::string> {
        return host_region(n);
      };
      link->copy_queue = [this](std::function<void()> on_complete)
          -> std::expected<std::unique_ptr<tiers::CopyQueue>, std::string> {
        return std::make_unique<Queue>(*this, std::move(on_complete));
      };
      link->failure = [this] { return failed ? std::string("stand-in device failed") : ""; };
      r.link = std::move(link);
    }
    return r;
  }

 private:
  // Page-aligned host memory (O_DIRECT writes go straight from L2).
  static tiers::Region host_region(std::size_t bytes) {
    auto* memory = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{4096}));
    return tiers::Region{.base = memory, .bytes = bytes, .free = [](std::byte* p) {
                           ::operator delete (p, std::align_val_t{4096});
                         }};
  }

  class Queue final : public tiers::CopyQueue {
   public:
    Queue(StandInDevice& device, std::function<void()> on_complete)
        : device_(device), worker_(std::move(on_complete)) {}
    std::expected<std::uint64_t, std::string> copy(std::byte* dst, const std::byte* src,
                                                   std::size_t bytes) override {
      if (lost()) return std::unexpected(std::string("stand-in device lost"));
      ++device_.queued;
      // The worker keeps a pointer to the transfer: one per size, kept.
      auto [it, added] = transfers_.try_emplace(bytes);
      if (added)
        it->second = [bytes](std::byte* d, const std::byte* s) { std::memcpy(d, s, bytes); };
      return worker_.copy(dst, src, it->second);
    }
    // The worker wakes the owner after each copy: nothing more to ask for.
    std::expected<void, std::string> notify() override {
      ++device_.notifies;
      return {};
    }
    std::expected<std::vector<tiers::CopyCompletion>, std::string> poll() override {
      if (lost()) return std::unexpected(std::string("stand-in device lost"));
      return worker_.poll();
    }
    std::expected<void, std::string> drain() override {
      if (lost()) return std::unexpected(std::string("stand-in device lost"));
      worker_.drain();
      return {};
    }
    std::size_t in_flight() const override { return worker_.in_flight(); }

   private:
    bool lost() const { return device_.lose_after >= 0 && device_.queued >= device_.lose_after; }
    StandInDevice& device_;
    std::map<std::size_t, tiers::CopyWorker::Transfer> transfers_;
    tiers::CopyWorker worker_;  // last: joined first, while the transfers exist
  };
};

}  // namespace kvtier::test_util

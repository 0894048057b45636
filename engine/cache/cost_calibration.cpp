// Start-up calibration of the cost model (engine/cache/cost_model.h): what a
// promotion from L2 and reads from each store tier (L3, ...) cost on this
// machine. (What passes cost, the scheduler measures:
// scheduler_calibration.cpp.)
#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/cache/block_meta.h"
#include "engine/cache/cost_model.h"
#include "engine/cache/kv_cache.h"
#include "engine/cache/kv_cache_stores.h"

namespace kvtier {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Store reads at once in a measurement, as many as L1 has room for: a few
// reads flatter a disk that allows bursts (a throttled or cloud volume read
// 8 blocks at 24 ms each where 63 took 31 ms each), and a load of a long
// prefix is tens of blocks.
constexpr int kMostReads = 32;
constexpr int kLeastReads = 2;
constexpr int kRounds = 5;  // samples of each tier figure: their median rules

}  // namespace

TierCosts KvCache::calibrate() {
  // The measurement takes the store's completions for its own reads and
  // writes: nothing else may be in flight to have its own taken too.
  drain();
  std::vector<int> blocks;
  for (int i = 0; i < kMostReads; ++i) {
    auto b = alloc_l1();
    if (!b) break;
    blocks.push_back(*b);
  }
  if (blocks.size() >= kLeastReads) {
    // Defined contents to move: free blocks hold leftovers, and the int8
    // encoding needs finite floats. (What a decode costs does not depend on
    // the values.)
    const std::vector<std::byte> zeros(plan_.block_bytes);
    l1_->copy(l1_->data(blocks[0]), zeros.data(), plan_.block_bytes);
    if (l2_ && l2_->slots().num_free() > 0) calibrate_l2(blocks[0], blocks[1]);
    for (const auto& s : stores_)
      if (s->store->stats().available) calibrate_store(*s, blocks);
  }  // else no room to measure: nothing added
  for (int b : blocks) l1_->release(b);
  return costs_.costs();
}

void KvCache::calibrate_l2(int l1_source, int l1_target) {
  // A promotion: the slot's bytes up into L1 (a copy, or a decode). Into one
  // block each time: an untimed first run faults its pages in, the rest are
  // what a promotion into a block in use costs.
  tiers::BlockPool& slots = l2_->slots();
  const int slot = *slots.allocate();
  plan_.to_l2(slots.data(slot), l1_->data(l1_source));
  for (int i = 0; i <= kRounds; ++i) {
    const auto start = Clock::now();
    plan_.from_l2(l1_->data(l1_target), slots.data(slot));
    if (i > 0) costs_.add_load(Tier::kL2, 0, seconds_since(start));
  }
  slots.release(slot);
}

void KvCache::calibrate_store(StoreTier& s, const std::vector<int>& blocks) {
  // A staged store reads into staging and decodes, as finish_store_op() does.
  const int reads = static_cast<int>(blocks.size());
  std::vector<int> staged;
  if (s.staging) {
    for (int i = 0; i < reads; ++i) staged.push_back(s.staging->allocate().value());
    s.leg->encode(s.staging->data(staged[0]), l1_->data(blocks[0]));
  }
  auto read_buffer = [&](int i) {
    return staged.empty() ? l1_->data(blocks[i]) : s.staging->data(staged[i]);
  };
  tiers::BlockRecord probe;
  probe.key = {0xFFFFFFFFFFFFFFFFULL, 0x6b76746965722d70ULL};  // on no chain
  probe.meta = encode_block_meta({}, fingerprint_, {});
  s.store->write(probe, read_buffer(0));
  s.store->drain();
  (void)s.store->poll();
  // One read, then `reads` at once: latency + n * per_block fits both.
  auto timed_reads = [&](int n) {
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) s.store->read(probe.key, probe.meta, read_buffer(i));
    s.store->drain();
    bool ok = true;
    for (const tiers::StoreCompletion& done : s.store->poll())
      ok = ok && done.status == tiers::StoreStatus::kOk;
    for (int i = 0; ok && !staged.empty() && i < n; ++i)
      s.leg->decode(l1_->data(blocks[i]), read_buffer(i));
    return ok ? seconds_since(start) : -1.0;
  };
  for (int i = 0; i < kRounds; ++i) {
    const double one = timed_reads(1);
    const double many = timed_reads(reads);
    if (one <= 0 || many <= 0) continue;
    const double per_block = std::max(0.0, (many - one) / (reads - 1));
    costs_.add_load(s.tier, std::max(0.0, one - per_block), per_block);
  }
  s.store->erase(probe.key);
  for (int b : staged) s.staging->release(b);
}

}  // namespace kvtier

#include "tiers/l3_store.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <system_error>

#include "tiers/xxhash_inline.h"

namespace kvtier::tiers {

L3Store::~L3Store() {
  if (slab_) drain();
  slab_.reset();  // joins the completion thread before the index closes
}

// ---- engine thread ---------------------------------------------------------

std::uint64_t L3Store::write(const BlockRecord& record, const std::byte* src) {
  const std::uint64_t ticket = next_ticket_++;
  const auto start = std::chrono::steady_clock::now();
  std::uint32_t slot = 0;
  {
    std::lock_guard lock(mu_);
    if (auto it = entries_.find(record.key); it != entries_.end()) {
      use_locked(it->second);
      complete_locked(ticket, record.key, true, StoreStatus::kOk);
      return ticket;
    }
    bool probe = false;
    if (!admit_locked(probe)) {
      ++stats_.dropped_writes;
      complete_locked(ticket, record.key, true, StoreStatus::kUnavailable);
      return ticket;
    }
    bool index_error = false;
    const auto taken = take_slot_locked(index_error);
    if (!taken) {
      if (index_error) {
        breaker_.failure(probe);
        complete_locked(ticket, record.key, true, StoreStatus::kIoError);
      } else {
        if (probe) breaker_.abandon_probe();  // nothing was tried: the next one probes
        ++stats_.dropped_writes;
        complete_locked(ticket, record.key, true, StoreStatus::kNoSpace);
      }
      return ticket;
    }
    slot = *taken;
    slots_[slot].owned = true;
    Entry entry;
    entry.record = record;
    entry.slot = slot;
    entries_.emplace(record.key, std::move(entry));
    Op op;
    op.key = record.key;
    op.is_write = true;
    op.slot = slot;
    op.buf = const_cast<std::byte*>(src);
    op.probe = probe;
    op.start = start;
    ops_.emplace(ticket, std::move(op));
  }
  // Outside mu_: a failed submit reports back into it.
  slab_->enqueue_write(slot, src, ticket * kMaxParts);
  return ticket;
}

std::uint64_t L3Store::read(const BlockKey& key, std::span<const std::byte> expected_meta,
                            std::byte* dst, int parts, std::uint64_t skip) {
  assert(parts >= 1 && parts <= kMaxParts);
  assert(options_.block_bytes % (static_cast<std::size_t>(parts) * SlabFile::kAlignment) == 0 ||
         parts == 1);
  const std::uint64_t ticket = next_ticket_++;
  const auto start = std::chrono::steady_clock::now();
  std::uint32_t slot = 0;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.state != EntryState::kStored) {
      complete_locked(ticket, key, false, StoreStatus::kNotFound);
      return ticket;
    }
    const std::vector<std::byte>& meta = it->second.record.meta;
    if (!std::equal(meta.begin(), meta.end(), expected_meta.begin(), expected_meta.end())) {
      // Another owner's block under this key (another model's, other tokens):
      // a hash collision or a damaged entry. Either way it must never be
      // served.
      ++stats_.checksum_failures;
      remove_stored_locked(key);
      complete_locked(ticket, key, false, StoreStatus::kChecksumMismatch);
      return ticket;
    }
    Entry& entry = it->second;
    // Pieces are left out only where each has its own checksum.
    const std::uint64_t all = parts == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << parts) - 1;
    skip = parts > 1 && entry.pieces.size() == static_cast<std::size_t>(parts) ? skip & all : 0;
    if (skip == all) {  // nothing to read: done, with nothing to check but the metadata
      use_locked(entry);
      ++stats_.reads;
      stats_.skipped_bytes += static_cast<long>(options_.block_bytes);
      complete_locked(ticket, key, false, StoreStatus::kOk, {}, options_.block_bytes);
      return ticket;
    }
    bool probe = false;
    if (!admit_locked(probe)) {
      complete_locked(ticket, key, false, StoreStatus::kUnavailable);
      return ticket;
    }
    slot = entry.slot;
    ++slots_[slot].reads;  // pins the slot: no eviction, no reuse
    use_locked(entry);
    Op op;
    op.key = key;
    op.slot = slot;
    op.buf = dst;
    op.checksum = entry.checksum;
    op.pieces = entry.pieces;
    op.skip = skip;
    op.probe = probe;
    op.start = start;
    op.parts = parts;
    op.parts_left = parts - std::popcount(op.skip);
    op.land(op.skip);
    ops_.emplace(ticket, std::move(op));
  }
  if (parts == 1) {
    slab_->enqueue_read(slot, dst, ticket * kMaxParts);
    return ticket;
  }
  const std::size_t piece = options_.block_bytes / static_cast<std::size_t>(parts);
  for (int part = 0; part < parts; ++part)
    if ((skip >> part & 1) == 0)
      pieces_.push_back({part, slot, piece, dst + static_cast<std::size_t>(part) * piece,
                         ticket * kMaxParts + static_cast<std::uint64_t>(part)});
  return ticket;
}

std::optional<int> L3Store::landed(std::uint64_t ticket) const {
  std::lock_guard lock(mu_);
  auto it = ops_.find(ticket);
  if (it == ops_.end()) return std::nullopt;
  return it->second.landed;
}

void L3Store::flush() {
  if (!pieces_.empty()) {
    // First pieces first, across blocks: their owner can start on them.
    std::stable_sort(pieces_.begin(), pieces_.end(),
                     [](const Piece& a, const Piece& b) { return a.part < b.part; });
    for (const Piece& p : pieces_)
      slab_->enqueue_read_range(p.slot, static_cast<std::size_t>(p.part) * p.bytes, p.bytes, p.dst,
                                p.tag);
    pieces_.clear();
  }
  slab_->flush();
}

std::vector<StoreCompletion> L3Store::poll() {
  flush();
  std::vector<StoreCompletion> out;
  std::lock_guard lock(mu_);
  out.swap(completions_);
  return out;
}

void L3Store::drain() {
  flush();
  slab_->wait_idle();
  std::lock_guard lock(mu_);
  persist_touched_locked();
}

std::expected<void, std::string> L3Store::sync() {
  drain();
  if (const int error = slab_->sync(); error != 0)
    return std::unexpected("slab fdatasync: " + std::system_category().message(-error));
  std::lock_guard lock(mu_);
  return index_->sync();
}

void L3Store::erase(const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.state == EntryState::kWriting) {
    // Not in the index yet; the write's completion sees it gone and frees the slot.
    entries_.erase(it);
    return;
  }
  remove_stored_locked(key);
}

void L3Store::touch(const BlockKey& key) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) use_locked(it->second);
}

void L3Store::set_protected(const BlockKey& key, bool is_protected) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) it->second.is_protected = is_protected;
}

// ---- any thread ------------------------------------------------------------

std::optional<BlockRecord> L3Store::lookup(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != EntryState::kStored) return std::nullopt;
  return it->second.record;
}

bool L3Store::contains(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.state == EntryState::kStored;
}

std::vector<BlockKey> L3Store::keys() const {
  std::lock_guard lock(mu_);
  std::vector<BlockKey> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_)
    if (entry.state == EntryState::kStored) out.push_back(key);
  return out;
}

std::optional<std::uint64_t> L3Store::slot_offset(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != EntryState::kStored) return std::nullopt;
  return slab_->offset(it->second.slot);
}

bool L3Store::accepting() const {
  std::lock_guard lock(mu_);
  return breaker_.accepting();
}

StoreStats L3Store::stats() const {
  std::lock_guard lock(mu_);
  StoreStats s = stats_;
  s.used_blocks = entries_.size();
  s.available = !breaker_.is_open();
  s.set_latencies(read_latency_, write_latency_);
  return s;
}

// ---- completion thread -----------------------------------------------------

void L3Store::on_io_complete(std::uint64_t tag, int result) {
  const std::uint64_t ticket = tag / kMaxParts;
  const int part = static_cast<int>(tag % kMaxParts);
  Op op;
  {
    std::lock_guard lock(mu_);
    auto it = ops_.find(ticket);
    if (it == ops_.end()) return;  // cannot happen: every tag is a ticket in ops_
    Op& o = it->second;
    const std::size_t expected =
        o.parts == 1 ? slot_bytes_ : options_.block_bytes / static_cast<std::size_t>(o.parts);
    if (result < 0 || static_cast<std::size_t>(result) != expected) o.short_transfer = true;
    if (--o.parts_left > 0) {
      o.land(std::uint64_t{1} << part);
      return;
    }
    op = std::move(o);
    ops_.erase(it);
  }
  const bool transferred = !op.short_transfer;
  // The buffer is the caller's until the completion is polled, so it still
  // holds what was written (or has just been read): hash it without the lock.
  auto piece_hash = [&](int part, int parts) {
    const std::size_t bytes = options_.block_bytes / static_cast<std::size_t>(parts);
    return XXH3_64bits(op.buf + static_cast<std::size_t>(part) * bytes, bytes);
  };
  if (op.is_write) {
    std::vector<std::uint64_t> pieces;
    std::uint64_t checksum = 0;
    if (transferred && options_.checksum_parts > 1) {
      for (int part = 0; part < options_.checksum_parts; ++part)
        pieces.push_back(piece_hash(part, options_.checksum_parts));
      checksum = piece_checksum_of(pieces);
    } else if (transferred) {
      checksum = XXH3_64bits(op.buf, options_.block_bytes);
    }
    const auto latency = std::chrono::steady_clock::now() - op.start;
    std::lock_guard lock(mu_);
    finish_write_locked(ticket, op, transferred, checksum, std::move(pieces), latency);
    return;
  }
  bool intact = transferred;
  if (intact && op.pieces.empty()) {
    intact = XXH3_64bits(op.buf, options_.block_bytes) == op.checksum;
  } else if (intact) {
    const int n = static_cast<int>(op.pieces.size());
    for (int part = 0; part < n && intact; ++part)
      intact = (op.skip >> part & 1) != 0 ||
               piece_hash(part, n) == op.pieces[static_cast<std::size_t>(part)];
  }
  const auto latency = std::chrono::steady_clock::now() - op.start;
  std::lock_guard lock(mu_);
  finish_read_locked(ticket, op, transferred, intact, latency);
}

std::size_t L3Store::skipped_bytes(int parts, std::uint64_t skip) const {
  return options_.block_bytes / static_cast<std::size_t>(parts) *
         static_cast<std::size_t>(std::popcount(skip));
}

void L3Store::finish_write_locked(std::uint64_t ticket, const Op& op, bool transferred,
                                  std::uint64_t checksum, std::vector<std::uint64_t> pieces,
                                  std::chrono::nanoseconds latency) {
  auto it = entries_.find(op.key);
  const bool still_wanted = it != entries_.end() && it->second.state == EntryState::kWriting &&
                            it->second.slot == op.slot;
  if (!transferred) {
    ++stats_.io_errors;
    breaker_.failure(op.probe);
    if (still_wanted) entries_.erase(it);
    release_slot_locked(op.slot);
    complete_locked(ticket, op.key, true, StoreStatus::kIoError, latency);
    return;
  }
  breaker_.success(op.probe);
  ++stats_.writes;
  stats_.write_bytes += static_cast<long>(options_.block_bytes);
  write_latency_.record(latency);
  if (!still_wanted) {  // erased while in flight: nothing to commit
    release_slot_locked(op.slot);
    complete_locked(ticket, op.key, true, StoreStatus::kOk, latency);
    return;
  }
  Entry& entry = it->second;
  entry.checksum = checksum;
  entry.pieces = std::move(pieces);
  entry.last_use = clock_++;
  // The payload is on the device; only now may the index point at it.
  if (auto r = index_->put(index_entry_locked(entry)); !r) {
    ++stats_.io_errors;
    breaker_.failure(false);
    entries_.erase(it);
    release_slot_locked(op.slot);
    complete_locked(ticket, op.key, true, StoreStatus::kIoError, latency);
    return;
  }
  entry.state = EntryState::kStored;
  lru_.insert({entry.last_use, op.key});
  complete_locked(ticket, op.key, true, StoreStatus::kOk, latency);
}

void L3Store::finish_read_locked(std::uint64_t ticket, const Op& op, bool transferred, bool intact,
                                 std::chrono::nanoseconds latency) {
  auto it = entries_.find(op.key);
  --slots_[op.slot].reads;
  // Erased or evicted while this read was in flight: the slot waited for it.
  // (Otherwise the slot is still owned, and a mismatch below releases it
  // itself: it must not go on the free list twice.)
  const bool orphaned = !slots_[op.slot].owned;
  const bool same_entry = it != entries_.end() && it->second.state == EntryState::kStored &&
                          it->second.slot == op.slot && it->second.checksum == op.checksum;
  StoreStatus status = StoreStatus::kOk;
  if (!transferred) {
    ++stats_.io_errors;
    breaker_.failure(op.probe);
    status = StoreStatus::kIoError;  // the entry stays: the bytes may be fine
  } else if (!intact) {
    breaker_.success(op.probe);  // the disk answered; the bytes are wrong
    ++stats_.checksum_failures;
    if (same_entry) remove_stored_locked(op.key);
    status = StoreStatus::kChecksumMismatch;
  } else {
    breaker_.success(op.probe);
    ++stats_.reads;
    const std::size_t skipped = skipped_bytes(op.parts, op.skip);
    stats_.read_bytes += static_cast<long>(options_.block_bytes - skipped);
    stats_.skipped_bytes += static_cast<long>(skipped);
    read_latency_.record(latency);
    // Persist the use that read() recorded; if RocksDB refuses, it stays in
    // touched_ for drain() to try again.
    if (same_entry && index_->put(index_entry_locked(it->second))) touched_.erase(op.key);
  }
  if (orphaned && slots_[op.slot].reads == 0) free_.push_back(op.slot);
  complete_locked(ticket, op.key, false, status, latency,
                  status == StoreStatus::kOk ? skipped_bytes(op.parts, op.skip) : 0);
}

void L3Store::on_submit_error(int /*error*/) {
  std::lock_guard lock(mu_);
  ++stats_.io_errors;
  breaker_.failure(false);
}

// ---- helpers, mu_ held -------------------------------------------------------

bool L3Store::admit_locked(bool& probe) {
  const CircuitBreaker::Admit admit = breaker_.admit();
  probe = admit == CircuitBreaker::Admit::kProbe;
  if (admit == CircuitBreaker::Admit::kNo) return false;
  // An index whose write failed takes no writes until it is reopened, and
  // that waits for the space it needs: until then this probe has failed.
  if (probe && !index_->recover()) {
    breaker_.failure(true);
    return false;
  }
  return true;
}

std::vector<BlockKey> L3Store::take_evicted() {
  std::lock_guard lock(mu_);
  return std::exchange(evicted_, {});
}

void L3Store::complete_locked(std::uint64_t ticket, const BlockKey& key, bool is_write,
                              StoreStatus status, std::chrono::nanoseconds latency,
                              std::size_t skipped_bytes) {
  completions_.push_back({ticket, key, is_write, status, latency, skipped_bytes});
}

std::optional<std::uint32_t> L3Store::take_slot_locked(bool& index_error) {
  index_error = false;
  if (!free_.empty()) {
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  // Least recently used first; protected entries and those being read stay.
  for (const auto& [last_use, key] : lru_) {
    const Entry& victim = entries_.at(key);
    if (victim.is_protected || slots_[victim.slot].reads > 0) continue;
    const std::uint32_t slot = victim.slot;
    // The index forgets the victim before anything overwrites its bytes.
    if (auto r = index_->erase(key); !r) {
      ++stats_.io_errors;
      index_error = true;
      return std::nullopt;
    }
    ++stats_.evictions;
    evicted_.push_back(key);
    touched_.erase(key);
    entries_.erase(key);
    lru_.erase({last_use, key});  // invalidates the loop: leave it now
    slots_[slot].owned = false;
    return slot;
  }
  return std::nullopt;
}

bool L3Store::remove_stored_locked(const BlockKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return true;
  const std::uint32_t slot = it->second.slot;
  const auto r = index_->erase(key);
  lru_.erase({it->second.last_use, key});
  touched_.erase(key);
  entries_.erase(it);
  if (!r) {
    // The index may still name this slot, so it must not be rewritten: it
    // stays owned (out of use) until a restart sorts the index out.
    ++stats_.io_errors;
    breaker_.failure(false);
    return false;
  }
  release_slot_locked(slot);
  return true;
}

void L3Store::release_slot_locked(std::uint32_t slot) {
  slots_[slot].owned = false;
  if (slots_[slot].reads == 0) free_.push_back(slot);
}

void L3Store::use_locked(Entry& entry) {
  if (entry.state != EntryState::kStored) return;
  lru_.erase({entry.last_use, entry.record.key});
  entry.last_use = clock_++;
  lru_.insert({entry.last_use, entry.record.key});
  touched_.insert(entry.record.key);
}

L3Entry L3Store::index_entry_locked(const Entry& entry) const {
  L3Entry e;
  e.record = entry.record;
  e.offset = slab_->offset(entry.slot);
  e.length = static_cast<std::uint32_t>(options_.block_bytes);
  e.checksum = entry.checksum;
  e.pieces = entry.pieces;
  e.last_use = entry.last_use;
  return e;
}

void L3Store::persist_touched_locked() {
  if (touched_.empty()) return;
  std::vector<L3Entry> batch;
  batch.reserve(touched_.size());
  for (const BlockKey& key : touched_) {
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.state == EntryState::kStored)
      batch.push_back(index_entry_locked(it->second));
  }
  // Only the order of uses is at stake: on failure keep them for next time.
  if (index_->put(batch)) touched_.clear();
}

}  // namespace kvtier::tiers

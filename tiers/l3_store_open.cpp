// Opening an L3 store (l3_store.h): what it may take of its file system,
// its index, the entries the index recovers, and the slab, in that order.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "tiers/align.h"
#include "tiers/disk_space.h"
#include "tiers/l3_store.h"

namespace kvtier::tiers {

L3Store::L3Store(const L3Options& options, std::size_t slot_bytes, std::size_t num_slots)
    : options_(options),
      slot_bytes_(slot_bytes),
      num_slots_(num_slots),
      slots_(num_slots),
      breaker_(options.backoff_initial, options.backoff_max, options.clock) {}

std::uint64_t L3Store::reserve_bytes(std::uint64_t filesystem_bytes) {
  return std::min<std::uint64_t>(std::uint64_t{1} << 30, filesystem_bytes / 20);
}

std::uint64_t L3Store::index_headroom_bytes(std::size_t num_slots) {
  return (std::uint64_t{8} << 20) + std::uint64_t{1024} * num_slots;
}

std::expected<std::unique_ptr<L3Store>, std::string> L3Store::open(const L3Options& options) {
  if (options.block_bytes == 0) return std::unexpected("L3: block_bytes must be positive");
  if (const int n = options.checksum_parts;
      n < 1 || n > kMaxParts ||
      (n > 1 && options.block_bytes % (static_cast<std::size_t>(n) * SlabFile::kAlignment) != 0))
    return std::unexpected("L3: checksum_parts " + std::to_string(n) + " must be 1, or at most " +
                           std::to_string(kMaxParts) + " pieces of a whole number of " +
                           std::to_string(SlabFile::kAlignment) + "-byte pages");
  const std::size_t slot_bytes = round_up(options.block_bytes, SlabFile::kAlignment);
  const std::size_t num_slots = options.capacity_bytes / slot_bytes;
  if (num_slots == 0)
    return std::unexpected("L3: capacity " + std::to_string(options.capacity_bytes) +
                           " bytes holds no " + std::to_string(slot_bytes) + "-byte slot");
  if (num_slots > 0xFFFFFFFFu) return std::unexpected("L3: more than 2^32 slots");

  const std::filesystem::path dir(options.path);
  std::error_code ec;
  const bool created = std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    return std::unexpected("L3: cannot create directory " + options.path + ": " +
                           (ec ? ec.message() : "not a directory"));
  const std::string slab_path = (dir / "slab").string();
  const std::string index_path = (dir / "index").string();
  const auto keep_free = check_space(options.path, slab_path, num_slots, slot_bytes);
  if (!keep_free) {
    if (created) std::filesystem::remove(dir, ec);  // not even a directory left behind
    return std::unexpected(keep_free.error());
  }

  struct stat st {};
  const bool had_slab = ::stat(slab_path.c_str(), &st) == 0;
  const bool had_index = ::lstat(index_path.c_str(), &st) == 0;
  std::unique_ptr<L3Store> store(new L3Store(options, slot_bytes, num_slots));
  auto opened = L3Index::open(index_path, options.format_tag, options.block_bytes, *keep_free);
  if (!opened) return std::unexpected("L3: " + opened.error());
  store->index_ = std::move(opened->index);
  store->warnings_ = std::move(opened->warnings);
  if (had_slab && !had_index)
    store->warnings_.push_back("L3: index " + index_path +
                               " is missing; what the slab holds is not used, L3 starts empty");
  if (auto ok = store->recover(opened->entries); !ok) return std::unexpected(ok.error());
  // The slab last: nothing after it can fail, and it undoes its own
  // failures.
  if (auto ok = store->open_slab(slab_path, *keep_free); !ok) return std::unexpected(ok.error());
  return store;
}

std::expected<std::uint64_t, std::string> L3Store::check_space(const std::string& path,
                                                               const std::string& slab_path,
                                                               std::size_t num_slots,
                                                               std::size_t slot_bytes) {
  // Everything this open could take, counted before any of it is taken.
  const auto space = disk_space(path);
  if (!space) return std::unexpected("L3: " + space.error());
  const std::uint64_t free = space->free;
  const std::uint64_t keep_free = index_headroom_bytes(num_slots) + reserve_bytes(space->total);
  const auto slab_needs = SlabFile::bytes_to_allocate(slab_path, num_slots * slot_bytes);
  if (!slab_needs) return std::unexpected("L3: " + slab_needs.error());
  if (free < *slab_needs + keep_free)
    return std::unexpected("L3: not enough free space in " + path + ": it needs " +
                           std::to_string(*slab_needs + keep_free) + " bytes free (" +
                           std::to_string(*slab_needs) + " for the slab, " +
                           std::to_string(keep_free) +
                           " kept for the index and the rest of the file system), but " +
                           std::to_string(free) + " bytes are free");
  return keep_free;
}

std::expected<void, std::string> L3Store::recover(std::vector<L3Entry>& entries) {
  // Every entry that names a whole, unclaimed slot in range.
  std::vector<BlockKey> drop;
  std::string first_drop;
  std::uint64_t max_use = 0;
  for (L3Entry& e : entries) {
    const std::uint64_t slot = e.offset / slot_bytes_;
    std::string why;
    if (e.offset % slot_bytes_ != 0)
      why = "offset " + std::to_string(e.offset) + " is not a slot boundary";
    else if (slot >= num_slots_)
      why = "slot " + std::to_string(slot) + " is beyond the " + std::to_string(num_slots_) +
            " slots";
    else if (e.length != options_.block_bytes)
      why = "length " + std::to_string(e.length) + " is not block_bytes";
    else if (slots_[slot].owned)
      why = "slot " + std::to_string(slot) + " is claimed twice";
    if (!why.empty()) {
      if (drop.empty()) first_drop = why;
      drop.push_back(e.record.key);
      continue;
    }
    slots_[slot].owned = true;
    Entry entry;
    entry.slot = static_cast<std::uint32_t>(slot);
    entry.checksum = e.checksum;
    entry.pieces = std::move(e.pieces);
    entry.last_use = e.last_use;
    entry.state = EntryState::kStored;
    max_use = std::max(max_use, e.last_use);
    lru_.insert({e.last_use, e.record.key});
    const BlockKey key = e.record.key;
    entry.record = std::move(e.record);
    entries_.emplace(key, std::move(entry));
  }
  clock_ = max_use + 1;
  for (std::size_t slot = num_slots_; slot-- > 0;)  // lowest slots handed out first
    if (!slots_[slot].owned) free_.push_back(static_cast<std::uint32_t>(slot));
  stats_.capacity_blocks = num_slots_;
  if (drop.empty()) return {};
  warnings_.push_back("L3: dropped " + std::to_string(drop.size()) +
                      " index entries with no valid slot (first: " + first_drop + ")");
  if (auto r = index_->erase(drop); !r) return std::unexpected("L3: " + r.error());
  return {};
}

std::expected<void, std::string> L3Store::open_slab(const std::string& path,
                                                    std::uint64_t keep_free) {
  SlabFileOptions slab_options;
  slab_options.path = path;
  slab_options.slot_bytes = slot_bytes_;
  slab_options.num_slots = num_slots_;
  slab_options.queue_depth = options_.queue_depth;
  slab_options.submit_batch = std::max(1, options_.submit_batch);
  slab_options.keep_free_bytes = keep_free;
  auto slab = SlabFile::open(
      slab_options,
      [this](std::uint64_t tag, int result) {
        on_io_complete(tag, result);
        if (options_.on_completion) options_.on_completion();
      },
      [this](int error) { on_submit_error(error); });
  if (!slab) return std::unexpected("L3: " + slab.error());
  slab_ = std::move(*slab);
  if (!slab_->direct())
    warnings_.push_back("slab " + path +
                        ": the file system refuses O_DIRECT; using the page cache");
  return {};
}

}  // namespace kvtier::tiers

#include "router/block_index.h"

#include <charconv>
#include <optional>
#include <vector>

namespace kvtier::router {

using nlohmann::json;

namespace {

std::optional<Tier> tier_parse(const json& name) {
  if (!name.is_string()) return std::nullopt;
  const auto& text = name.get_ref<const std::string&>();
  for (int t = 0; t < kNumTiers; ++t)
    if (text == kTierNames[t].name) return static_cast<Tier>(t);
  return std::nullopt;
}

std::optional<std::uint64_t> seq_parse(const json& object) {
  const auto it = object.find("seq");
  if (it == object.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::uint64_t>();
}

// One (block, tier[, stored]) entry of a snapshot or an event batch.
struct Entry {
  tiers::BlockKey key;
  Tier tier = Tier::kL1;
  bool stored = true;
};

std::expected<std::vector<Entry>, std::string> entries_parse(const json& list, bool events) {
  if (!list.is_array()) return std::unexpected(std::string("not an array"));
  std::vector<Entry> out;
  out.reserve(list.size());
  for (const json& item : list) {
    if (!item.is_object()) return std::unexpected(std::string("an entry is not an object"));
    const auto block = item.find("block");
    const auto tier = item.find("tier");
    if (block == item.end() || !block->is_string() || tier == item.end())
      return std::unexpected(std::string("an entry lacks its block or tier"));
    Entry e;
    const auto key = tiers::block_key_from_hex(block->get_ref<const std::string&>());
    if (!key) return std::unexpected("block '" + block->dump() + "' is not 32 hex digits");
    e.key = *key;
    const auto t = tier_parse(*tier);
    if (!t) return std::unexpected("unknown tier " + tier->dump());
    e.tier = *t;
    if (events) {
      const auto stored = item.find("stored");
      if (stored == item.end() || !stored->is_boolean())
        return std::unexpected(std::string("an event lacks a boolean 'stored'"));
      e.stored = stored->get<bool>();
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace

std::expected<void, std::string> BlockIndex::reset(const json& snapshot) {
  if (!snapshot.is_object()) return std::unexpected(std::string("snapshot is not an object"));
  const auto seq = seq_parse(snapshot);
  if (!seq) return std::unexpected(std::string("snapshot lacks a non-negative 'seq'"));
  const auto fp = snapshot.find("fingerprint");
  std::uint64_t fingerprint = 0;
  if (fp == snapshot.end() || !fp->is_string() || fp->get_ref<const std::string&>().size() != 16)
    return std::unexpected(std::string("snapshot lacks a 16-hex-digit 'fingerprint'"));
  const std::string& fp_text = fp->get_ref<const std::string&>();
  if (auto [end, ec] = std::from_chars(fp_text.data(), fp_text.data() + 16, fingerprint, 16);
      ec != std::errc() || end != fp_text.data() + 16)
    return std::unexpected("fingerprint '" + fp_text + "' is not hex");
  const auto page = snapshot.find("page_size");
  if (page == snapshot.end() || !page->is_number_integer() || page->get<long long>() < 1 ||
      page->get<long long>() > (1 << 20))
    return std::unexpected(std::string("snapshot lacks a positive 'page_size'"));
  const auto blocks = snapshot.find("blocks");
  if (blocks == snapshot.end()) return std::unexpected(std::string("snapshot lacks 'blocks'"));
  auto entries = entries_parse(*blocks, false);
  if (!entries) return std::unexpected("snapshot blocks: " + entries.error());

  clear();
  for (const Entry& e : *entries) {
    std::uint8_t& bits = entries_[e.key];
    const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(e.tier));
    if (!(bits & bit)) ++counts_[e.tier];
    bits |= bit;
  }
  fingerprint_ = fingerprint;
  page_size_ = static_cast<int>(page->get<long long>());
  seq_ = *seq;
  stale_ = false;
  return {};
}

std::expected<void, std::string> BlockIndex::apply(const json& batch) {
  if (!batch.is_object()) return std::unexpected(std::string("event batch is not an object"));
  const auto seq = seq_parse(batch);
  if (!seq) return std::unexpected(std::string("event batch lacks a non-negative 'seq'"));
  const auto events = batch.find("events");
  if (events == batch.end()) return std::unexpected(std::string("event batch lacks 'events'"));
  auto entries = entries_parse(*events, true);
  if (!entries)
    return std::unexpected("event batch " + std::to_string(*seq) + ": " + entries.error());
  if (stale_) return std::unexpected(std::string("events before a snapshot"));
  if (*seq != seq_ + 1) {
    const std::string why = "event batch " + std::to_string(*seq) + " after " +
                            std::to_string(seq_) + ": events were lost";
    clear();
    return std::unexpected(why);
  }
  for (const Entry& e : *entries) {
    const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(e.tier));
    if (e.stored) {
      std::uint8_t& bits = entries_[e.key];
      if (!(bits & bit)) ++counts_[e.tier];
      bits |= bit;
    } else if (auto it = entries_.find(e.key); it != entries_.end() && (it->second & bit)) {
      --counts_[e.tier];
      it->second = static_cast<std::uint8_t>(it->second & ~bit);
      if (it->second == 0) entries_.erase(it);
    }
  }
  seq_ = *seq;
  return {};
}

void BlockIndex::clear() {
  entries_.clear();
  counts_ = {};
  stale_ = true;
}

PrefixMatch BlockIndex::match(std::span<const tiers::BlockKey> keys) const {
  PrefixMatch m;
  if (stale_) return m;
  for (const tiers::BlockKey& key : keys) {
    const auto it = entries_.find(key);
    if (it == entries_.end()) break;
    int fastest = 0;
    while (!(it->second & (1u << fastest))) ++fastest;
    ++m.by_tier[fastest];
    ++m.blocks;
  }
  return m;
}

}  // namespace kvtier::router

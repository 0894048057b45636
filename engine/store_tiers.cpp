#include "engine/store_tiers.h"

#include "tiers/l3_store.h"
#include "tiers/slab_file.h"

namespace kvtier {

namespace {

// L3: the SSD store (tiers/l3_store.h), under l3_path.
StoreTierSpec l3_tier(const CacheConfig& config) {
  StoreTierSpec spec;
  spec.tier = Tier::kL3;
  spec.format = config.l3_format;
  spec.write_policy = config.write_policy;
  spec.alignment = tiers::SlabFile::kAlignment;
  spec.max_parts = tiers::L3Store::kMaxParts;
  spec.open = [path = config.l3_path, bytes = config.l3_bytes,
               backoff = config.l3_backoff](const StoreParams& params)
      -> std::expected<std::unique_ptr<tiers::BlockStore>, std::string> {
    tiers::L3Options options;
    options.path = path;
    options.capacity_bytes = bytes;
    options.block_bytes = params.block_bytes;
    options.format_tag = params.format_tag;
    options.backoff_initial = backoff;
    options.on_completion = params.on_completion;
    auto store = tiers::L3Store::open(options);
    if (!store) return std::unexpected(store.error());
    return std::unique_ptr<tiers::BlockStore>(std::move(*store));
  };
  return spec;
}

}  // namespace

std::vector<StoreTierSpec> store_tiers(const CacheConfig& config) {
  std::vector<StoreTierSpec> specs;
  if (!config.l3_path.empty()) specs.push_back(l3_tier(config));
  return specs;
}

}  // namespace kvtier

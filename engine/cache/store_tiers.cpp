#include "engine/cache/store_tiers.h"

#include "tiers/l3_store.h"
#include "tiers/redis_store.h"
#include "tiers/slab_file.h"
#include "util/private_file.h"

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
    options.checksum_parts = params.checksum_parts;
    options.backoff_initial = backoff;
    options.on_completion = params.on_completion;
    auto store = tiers::L3Store::open(options);
    if (!store) return std::unexpected(store.error());
    return std::unique_ptr<tiers::BlockStore>(std::move(*store));
  };
  spec.where = config.l3_path;
  spec.describe = [path = config.l3_path, policy = config.write_policy](const TierStats& s) {
    return std::to_string(s.capacity_blocks) + " blocks in " + path + " (" +
           std::string(to_string(policy)) + ", " + std::to_string(s.used_blocks) +
           " recovered from the last run)";
  };
  return spec;
}

// The remote tier: Redis (tiers/redis_store.h) at `remote`. Its settings
// are read when it opens, so that a bad one leaves the tier out with the
// reason instead of stopping the daemon.
StoreTierSpec remote_tier(const CacheConfig& config) {
  StoreTierSpec spec;
  spec.tier = Tier::kRemote;
  spec.format = config.remote_format;
  spec.write_policy = config.remote_write;
  spec.open = [config](const StoreParams& params)
      -> std::expected<std::unique_ptr<tiers::BlockStore>, std::string> {
    tiers::RedisStoreOptions options;
    auto addresses = tiers::parse_redis_addresses(config.remote);
    if (!addresses) return std::unexpected("remote '" + config.remote + "': " + addresses.error());
    options.addresses = std::move(*addresses);
    options.key_namespace = config.remote_namespace;
    options.timeout = config.remote_timeout;
    if (!config.remote_password_file.empty()) {
      auto password =
          util::read_private_file("remote_password_file", config.remote_password_file, 4096);
      if (!password) return std::unexpected(password.error());
      options.password = std::move(*password);
    }
    if (!config.remote_secret.empty()) {
      auto secret = tiers::RemoteSecret::from_file(config.remote_secret);
      if (!secret) return std::unexpected(secret.error());
      options.secret = std::make_shared<const tiers::RemoteSecret>(std::move(*secret));
    }
    options.block_bytes = params.block_bytes;
    options.format_tag = params.format_tag;
    options.on_completion = params.on_completion;
    auto store = tiers::RedisStore::open(options);
    if (!store) return std::unexpected(store.error());
    return std::unique_ptr<tiers::BlockStore>(std::move(*store));
  };
  spec.where = config.remote;
  spec.describe = [config](const TierStats&) {
    return config.remote + " namespace " + config.remote_namespace + " (write " +
           std::string(remote_write_name(config.remote_write)) +
           (config.remote_secret.empty() ? ", no secret)" : ", with the fleet's secret)");
  };
  return spec;
}

}  // namespace

std::vector<StoreTierSpec> store_tiers(const CacheConfig& config) {
  std::vector<StoreTierSpec> specs;
  if (!config.l3_path.empty()) specs.push_back(l3_tier(config));
  if (!config.remote.empty()) specs.push_back(remote_tier(config));
  return specs;
}

}  // namespace kvtier

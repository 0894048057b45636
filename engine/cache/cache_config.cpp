#include "engine/cache/cache_config.h"

namespace kvtier {

std::string_view to_string(WritePolicy policy) {
  switch (policy) {
    case WritePolicy::kWriteBack:
      return "write_back";
    case WritePolicy::kWriteThrough:
      return "write_through";
    case WritePolicy::kOff:
      return "off";
  }
  return "write_back";
}

std::expected<WritePolicy, std::string> parse_write_policy(std::string_view name) {
  if (name == "write_back") return WritePolicy::kWriteBack;
  if (name == "write_through") return WritePolicy::kWriteThrough;
  return std::unexpected("unknown write_policy '" + std::string(name) +
                         "' (expected write_back or write_through)");
}

std::string_view remote_write_name(WritePolicy policy) {
  switch (policy) {
    case WritePolicy::kWriteBack:
      return "back";
    case WritePolicy::kWriteThrough:
      return "through";
    case WritePolicy::kOff:
      return "off";
  }
  return "through";
}

std::expected<WritePolicy, std::string> parse_remote_write(std::string_view name) {
  if (name == "through") return WritePolicy::kWriteThrough;
  if (name == "back") return WritePolicy::kWriteBack;
  if (name == "off") return WritePolicy::kOff;
  return std::unexpected("unknown remote_write '" + std::string(name) +
                         "' (expected through, back or off)");
}

std::string_view to_string(KvFormat format) { return format == KvFormat::kInt8 ? "int8" : "exact"; }

std::expected<KvFormat, std::string> parse_kv_format(std::string_view name) {
  if (name == "exact") return KvFormat::kExact;
  if (name == "int8") return KvFormat::kInt8;
  return std::unexpected("unknown KV format '" + std::string(name) + "' (expected exact or int8)");
}

std::expected<void, std::string> CacheConfig::validate() const {
  if (l2_format == KvFormat::kInt8 && l3_format == KvFormat::kExact && !l3_path.empty())
    return std::unexpected(
        "l2_format int8 over l3_format exact would store lossy blocks on L3 at 4x their int8 "
        "size; use l3_format int8 with an int8 L2 (or l2_format exact)");
  if (l2_format == KvFormat::kInt8 && remote_format == KvFormat::kExact && !remote.empty())
    return std::unexpected(
        "l2_format int8 over remote_format exact would share lossy blocks at 4x their int8 "
        "size; use remote_format int8 with an int8 L2 (or l2_format exact)");
  return {};
}

}  // namespace kvtier

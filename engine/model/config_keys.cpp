#include "engine/model/config_keys.h"

namespace kvtier::config_keys {

using json = nlohmann::json;
using Error = std::unexpected<std::string>;

std::string describe(const json& value) {
  if (value.is_structured()) return std::string("a JSON ") + value.type_name();
  return value.dump();
}

std::expected<std::optional<int>, std::string> read_int(const json& root, const char* key,
                                                        std::int64_t max, bool required) {
  auto it = root.find(key);
  if (it == root.end() || (!required && it->is_null())) {
    if (required) return Error(std::string("missing required key \"") + key + "\"");
    return std::optional<int>();
  }
  // JSON 12.0 is a float and "12" a string: both are refused rather than coerced.
  if (!it->is_number_integer()) {
    return Error(std::string("key \"") + key + "\" must be an integer, got " + describe(*it));
  }
  // Unsigned values above INT64_MAX are out of range whatever the limit.
  const bool too_big = it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(max);
  const std::int64_t v = too_big ? max + 1 : it->get<std::int64_t>();
  if (v <= 0)
    return Error(std::string("key \"") + key + "\" must be positive, got " + describe(*it));
  if (v > max) {
    return Error(std::string("key \"") + key + "\" is " + describe(*it) + ", above the limit " +
                 std::to_string(max));
  }
  return std::optional<int>(static_cast<int>(v));
}

std::expected<int, std::string> require_int(const json& root, const char* key, std::int64_t max) {
  auto v = read_int(root, key, max, /*required=*/true);
  if (!v) return Error(v.error());
  return **v;
}

std::expected<std::optional<std::string>, std::string> read_string(const json& root,
                                                                   const char* key) {
  auto it = root.find(key);
  if (it == root.end()) return std::optional<std::string>();
  if (!it->is_string()) {
    return Error(std::string("key \"") + key + "\" must be a string, got " + describe(*it));
  }
  return std::optional<std::string>(it->get<std::string>());
}

}  // namespace kvtier::config_keys

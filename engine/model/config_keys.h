// The keys of a model's config.json, read one at a time with the checks every
// family's dialect shares: integers that are JSON integers (12.0 and "12" are
// refused, not coerced), positive and within a limit, strings that are
// strings. Errors name the key and quote what was there.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kvtier::config_keys {

// Upper limits every family's sizes share: they keep every size product
// (e.g. vocab_size * n_embd * 4 bytes, or n_layer * 12 * n_embd^2) far inside
// 64 bits, and reject configs that are corrupt rather than merely large.
inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxEmbd = 65536;
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxPositions = std::int64_t{1} << 20;

// A JSON value for an error message: scalars as written, containers by type
// only (dumping a hostile, deeply nested value would recurse without bound).
std::string describe(const nlohmann::json& value);

// A required or optional positive integer key, with its inclusive upper limit.
std::expected<std::optional<int>, std::string> read_int(const nlohmann::json& root, const char* key,
                                                        std::int64_t max, bool required);
std::expected<int, std::string> require_int(const nlohmann::json& root, const char* key,
                                            std::int64_t max);

// An optional string key; nullopt when absent.
std::expected<std::optional<std::string>, std::string> read_string(const nlohmann::json& root,
                                                                   const char* key);

}  // namespace kvtier::config_keys

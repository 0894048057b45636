#include "wire/param_fields.h"

#include <sys/random.h>

#include <charconv>
#include <chrono>
#include <limits>

namespace kvtier::wire::fields {

using nlohmann::json;

namespace {

std::string quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

// The shortest text that reads back as `v`: a refused number as the client
// wrote it ("-1e-300", "1.0000001"), where "%g" would say "1" for the latter.
std::string number_text(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

}  // namespace

std::expected<int, std::string> integer(const json& v, std::string_view key, int min, int max) {
  if (!v.is_number_integer()) return std::unexpected(quoted(key) + " must be an integer");
  bool in_range;
  long long value = 0;
  if (v.is_number_unsigned()) {
    // JSON's non-negative integers parse as unsigned: the minimum applies
    // here too (the fuzzer found "n": 0 and "max_tokens": 0 let through).
    const auto u = v.get<std::uint64_t>();
    in_range =
        (min <= 0 || u >= static_cast<std::uint64_t>(min)) && u <= static_cast<std::uint64_t>(max);
    value = in_range ? static_cast<long long>(u) : 0;
  } else {
    value = v.get<long long>();
    in_range = value >= min && value <= max;
  }
  if (!in_range) {
    return std::unexpected(quoted(key) + " must be in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  return static_cast<int>(value);
}

// Checked after narrowing, another value would be judged: -1e-300 becomes
// -0.0f (passing ">= 0"), 1e-300 becomes 0.0f (failing "> 0" with "got 0",
// which the client never sent), 1 + 1e-9 becomes 1.0f, and a double beyond
// FLT_MAX has no float. A positive value under the smallest positive float
// keeps its meaning as that float (a tiny top_p keeps only the most likely
// token, a tiny temperature samples among the tied best instead of turning
// greedy): refusing a value the protocol allows would be wrong.
std::expected<float, std::string> sampling_float(const json& v, std::string_view key,
                                                 bool zero_allowed, double max,
                                                 std::string_view meaning) {
  const std::string range = (zero_allowed ? "[0, " : "(0, ") + number_text(max) + "]";
  const auto refuse = [&](const std::string& got) {
    return std::unexpected(quoted(key) + " must be a number in " + range + " (" +
                           std::string(meaning) + ")" + got);
  };
  if (!v.is_number()) return refuse("");
  const double d = v.get<double>();
  if (!((zero_allowed ? d >= 0.0 : d > 0.0) && d <= max)) return refuse(", got " + number_text(d));
  if (d == 0.0) return 0.0f;  // -0 too: a client's -0 is 0, not a sign
  const float f = static_cast<float>(d);
  return f > 0.0f ? f : std::numeric_limits<float>::denorm_min();
}

std::expected<std::uint64_t, std::string> seed(const json& v, std::string_view key) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<long long>() >= 0)
    return static_cast<std::uint64_t>(v.get<long long>());
  return std::unexpected(quoted(key) + " must be a non-negative integer");
}

std::uint64_t random_seed() {
  std::uint64_t seed = 0;
  // 8 bytes from the urandom source neither block nor come back short once
  // the system has booted; the clock only stands in should the call fail.
  if (::getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) {
    seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return seed >> 11;
}

std::expected<std::vector<int>, std::string> token_ids(const json& v, std::string_view key) {
  if (!v.is_array()) return std::unexpected(quoted(key) + " must be an array of integers");
  std::vector<int> ids;
  ids.reserve(v.size());
  for (const auto& t : v) {
    auto id = integer(t, std::string(key) + "[]", 0, std::numeric_limits<int>::max());
    if (!id) return std::unexpected(id.error());
    ids.push_back(*id);
  }
  return ids;
}

std::expected<std::vector<std::string>, std::string> strings(const json& v, std::string_view key) {
  const std::string error = quoted(key) + " must be an array of strings";
  if (!v.is_array()) return std::unexpected(error);
  std::vector<std::string> out;
  for (const auto& s : v) {
    if (!s.is_string()) return std::unexpected(error);
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::expected<std::string, std::string> cache_salt(const json& v) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxCacheSaltBytes) {
    return std::unexpected("'cache_salt' must be a string of at most " +
                           std::to_string(kMaxCacheSaltBytes) + " bytes");
  }
  return v.get<std::string>();
}

std::expected<std::optional<bool>, std::string> tool_choice(const nlohmann::json& v) {
  if (v == "none") return false;
  if (v == "auto") return std::nullopt;
  return std::unexpected(
      "'tool_choice' must be \"none\" (the model's own tool off) or \"auto\"; client functions "
      "are not supported");
}

}  // namespace kvtier::wire::fields

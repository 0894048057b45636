#include "tiers/redis_slots.h"

#include <charconv>
#include <cstdint>

namespace kvtier::tiers {

namespace {

// CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0),
// the one the Redis Cluster specification names. Keys are short; bit by bit
// is fast enough beside the network round it routes.
std::uint16_t crc16(std::string_view bytes) {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<std::uint16_t>(crc << 1);
  }
  return crc;
}

std::optional<int> parse_int(std::string_view text, int lo, int hi) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < lo || value > hi)
    return std::nullopt;
  return value;
}

bool is_slot(const RedisReply& r) {
  return r.kind == RedisReply::Kind::kInteger && r.integer >= 0 && r.integer < kRedisSlots;
}

}  // namespace

int redis_key_slot(std::string_view key) {
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) % kRedisSlots;
}

std::expected<std::vector<SlotRange>, std::string> parse_cluster_slots(const RedisReply& reply,
                                                                       const RedisAddress& asked) {
  const std::string from = "CLUSTER SLOTS from " + asked.to_string();
  if (reply.is_error()) return std::unexpected(from + ": " + reply.str);
  if (reply.kind != RedisReply::Kind::kArray) return std::unexpected(from + ": not an array");
  std::vector<SlotRange> ranges;
  for (const RedisReply& entry : reply.elements) {
    // [first, last, [host, port, id, ...], replicas...]
    if (entry.kind != RedisReply::Kind::kArray || entry.elements.size() < 3 ||
        !is_slot(entry.elements[0]) || !is_slot(entry.elements[1]) ||
        entry.elements[0].integer > entry.elements[1].integer)
      return std::unexpected(from + ": a slot range that is not [first, last, master...]");
    const RedisReply& master = entry.elements[2];
    if (master.kind != RedisReply::Kind::kArray || master.elements.size() < 2 ||
        master.elements[0].kind != RedisReply::Kind::kString ||
        master.elements[1].kind != RedisReply::Kind::kInteger || master.elements[1].integer < 1 ||
        master.elements[1].integer > 65535)
      return std::unexpected(from + ": a master that is not [host, port, ...]");
    std::string host = master.elements[0].str;
    if (host == "?") continue;
    if (host.empty()) {
      if (asked.is_unix()) continue;
      host = asked.host;
    }
    ranges.push_back(
        {static_cast<int>(entry.elements[0].integer), static_cast<int>(entry.elements[1].integer),
         RedisAddress::tcp(std::move(host), static_cast<int>(master.elements[1].integer))});
  }
  return ranges;
}

std::optional<Redirect> parse_redirect(const RedisReply& reply, const RedisAddress& from) {
  if (!reply.is_error()) return std::nullopt;
  std::string_view text = reply.str;
  Redirect r;
  if (text.starts_with("MOVED ")) {
    text.remove_prefix(6);
  } else if (text.starts_with("ASK ")) {
    r.ask = true;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto slot = parse_int(text.substr(0, space), 0, kRedisSlots - 1);
  const std::string_view endpoint = text.substr(space + 1);
  // host:port, the host unbracketed even when it is IPv6: the port is after
  // the last colon. An empty host is `from`'s.
  const auto colon = endpoint.rfind(':');
  if (!slot || colon == std::string_view::npos) return std::nullopt;
  const auto port = parse_int(endpoint.substr(colon + 1), 1, 65535);
  std::string host(endpoint.substr(0, colon));
  if (!port || host == "?" || (host.empty() && from.is_unix())) return std::nullopt;
  if (host.empty()) host = from.host;
  r.slot = *slot;
  r.to = RedisAddress::tcp(std::move(host), *port);
  return r;
}

}  // namespace kvtier::tiers

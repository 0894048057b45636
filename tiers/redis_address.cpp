#include "tiers/redis_address.h"

#include <charconv>

namespace kvtier::tiers {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::expected<int, std::string> parse_port(std::string_view text) {
  int port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc{} || end != text.data() + text.size() || port < 1 || port > 65535)
    return std::unexpected("port \"" + std::string(text) + "\" is not 1 to 65535");
  return port;
}

std::expected<RedisAddress, std::string> parse_one(std::string_view text) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  if (text.starts_with("rediss://"))
    return std::unexpected(quoted +
                           ": TLS (rediss://) is not supported; use redis:// or a Unix socket");
  if (text.starts_with("unix://")) {
    text.remove_prefix(7);
    if (!text.starts_with("/")) return std::unexpected(quoted + ": a socket path must be absolute");
  }
  if (text.starts_with("/")) {
    if (text.find('?') != std::string_view::npos)
      return std::unexpected(quoted + ": no query strings");
    return RedisAddress::unix_socket(std::string(text));
  }
  if (text.starts_with("redis://")) text.remove_prefix(8);
  if (text.find('@') != std::string_view::npos)
    return std::unexpected(quoted +
                           ": no credentials in the address (they would show in ps, logs and "
                           "config.get); set remote_password_file");
  if (text.find('?') != std::string_view::npos)
    return std::unexpected(quoted + ": no query strings");
  if (const auto slash = text.find('/'); slash != std::string_view::npos) {
    if (text.substr(slash) != "/0" && text.substr(slash) != "/")
      return std::unexpected(quoted + ": only database 0 (the only one Redis Cluster has)");
    text = text.substr(0, slash);
  }
  RedisAddress address;
  std::string_view port;
  if (text.starts_with("[")) {  // [IPv6]:port
    const auto close = text.find(']');
    if (close == std::string_view::npos) return std::unexpected(quoted + ": unclosed [");
    address.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(":"))
      return std::unexpected(quoted + ": expected :PORT after ]");
    if (!rest.empty()) port = rest.substr(1);
  } else {
    const auto colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') != colon)
      return std::unexpected(quoted + ": write an IPv6 address as [ADDRESS]:PORT");
    address.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) port = text.substr(colon + 1);
  }
  if (address.host.empty()) return std::unexpected(quoted + ": no host");
  if (!port.empty() || text.ends_with(":")) {
    auto p = parse_port(port);
    if (!p) return std::unexpected(quoted + ": " + p.error());
    address.port = *p;
  }
  return address;
}

}  // namespace

std::string RedisAddress::to_string() const {
  if (is_unix()) return unix_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::expected<std::vector<RedisAddress>, std::string> parse_redis_addresses(std::string_view text) {
  std::vector<RedisAddress> out;
  while (true) {
    const auto comma = text.find(',');
    const std::string_view one = trim(text.substr(0, comma));
    if (one.empty()) return std::unexpected(std::string("an empty address in the list"));
    auto address = parse_one(one);
    if (!address) return std::unexpected(address.error());
    out.push_back(std::move(*address));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace kvtier::tiers

#include "wire/http/listener.h"

#include <charconv>
#include <sstream>

#include "util/private_file.h"

namespace kvtier::wire::http {

namespace {

namespace ip = boost::asio::ip;

constexpr std::size_t kMinKeyBytes = 16, kMaxKeyBytes = 4096;

std::expected<ip::tcp::endpoint, std::string> endpoint_of(const std::string& text) {
  auto endpoint = tcp_endpoint_parse(text);
  if (!endpoint)
    return std::unexpected("http_listen '" + text +
                           "': give HOST:PORT (127.0.0.1:8000, [::1]:8000, 0.0.0.0:8000) or "
                           "a port alone for loopback");
  return *endpoint;
}

}  // namespace

std::optional<ip::tcp::endpoint> tcp_endpoint_parse(const std::string& text) {
  std::string host = "127.0.0.1", port = text;
  if (const std::size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "localhost") host = "127.0.0.1";
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return std::nullopt;
  boost::system::error_code bad;
  const ip::address address = ip::make_address(host, bad);
  if (bad) return std::nullopt;
  return ip::tcp::endpoint(address, static_cast<unsigned short>(value));
}

std::expected<std::optional<ListenSpec>, std::string> listen_spec(const std::string& listen,
                                                                  const std::string& api_key_file,
                                                                  bool read_key) {
  if (listen.empty()) {
    if (!api_key_file.empty())
      return std::unexpected(
          std::string("http_api_key_file is set but http_listen is not: the "
                      "Unix socket is guarded by its file mode, not a key"));
    return std::nullopt;
  }
  auto endpoint = endpoint_of(listen);
  if (!endpoint) return std::unexpected(endpoint.error());
  ListenSpec spec{*endpoint, {}};
  if (!api_key_file.empty() && !read_key) return spec;
  if (!api_key_file.empty()) {
    auto key = util::read_private_file("http_api_key_file", api_key_file, kMaxKeyBytes);
    if (!key) return std::unexpected(key.error());
    if (key->size() < kMinKeyBytes)
      return std::unexpected("http_api_key_file " + api_key_file + ": a key of " +
                             std::to_string(key->size()) + " bytes; give at least " +
                             std::to_string(kMinKeyBytes));
    spec.api_key = std::move(*key);
  } else if (!endpoint->address().is_loopback()) {
    return std::unexpected("http_listen " + listen +
                           " is reachable beyond this machine: set http_api_key_file to a file "
                           "(mode 0600) holding the API key clients must send");
  }
  return spec;
}

std::expected<void, std::string> tcp_listen(ip::tcp::acceptor& acceptor,
                                            const ip::tcp::endpoint& endpoint) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(boost::asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::ostringstream where;
    where << endpoint;
    return std::unexpected("http_listen: cannot listen on " + where.str() + ": " + ec.message());
  }
  return {};
}

std::string describe(const ListenSpec& spec) {
  std::ostringstream at;
  at << spec.endpoint;
  std::string page = "http://" + at.str() + "/";
  if (spec.endpoint.address().is_unspecified())
    page = "this machine's address, port " + std::to_string(spec.endpoint.port()) + ", path /";
  return at.str() + (spec.api_key.empty() ? "" : " (API key required)") + "; the page at " + page;
}

}  // namespace kvtier::wire::http

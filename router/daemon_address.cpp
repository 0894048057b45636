#include "router/daemon_address.h"

#include <nlohmann/json.hpp>

#include "wire/http/listener.h"

namespace kvtier::router {

namespace asio = boost::asio;

std::string DaemonAddress::auth_line() const {
  if (!tcp || api_key.empty()) return {};
  return nlohmann::json{{"jsonrpc", "2.0"},
                        {"id", "auth"},
                        {"method", "auth"},
                        {"params", {{"api_key", api_key}}}}
             .dump() +
         "\n";
}

std::expected<DaemonAddress, std::string> daemon_address_parse(const std::string& text,
                                                               const std::string& api_key) {
  constexpr std::string_view kTcp = "tcp://";
  DaemonAddress a;
  a.text = text;
  if (text.starts_with(kTcp)) {
    const auto endpoint = wire::http::tcp_endpoint_parse(text.substr(kTcp.size()));
    if (!endpoint || text.size() == kTcp.size())
      return std::unexpected("--daemon '" + text +
                             "': give tcp://HOST:PORT with a numeric HOST (tcp://10.0.0.2:8000, "
                             "tcp://[fd00::2]:8000) or a Unix socket's path");
    a.endpoint = *endpoint;
    a.tcp = true;
    a.api_key = api_key;
    return a;
  }
  if (text.empty() || text.find("://") != std::string::npos)
    return std::unexpected("--daemon '" + text + "': give a Unix socket's path or tcp://HOST:PORT");
  a.endpoint = asio::local::stream_protocol::endpoint(text);
  return a;
}

}  // namespace kvtier::router

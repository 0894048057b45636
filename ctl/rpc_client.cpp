#include "ctl/rpc_client.h"

#include <utility>

namespace kvtier::ctl {

using nlohmann::json;
using stream = asio::local::stream_protocol;

RpcClient::RpcClient(std::unique_ptr<asio::io_context> io, stream::socket socket)
    : io_(std::move(io)), socket_(std::move(socket)) {}

std::expected<RpcClient, CallFailure> RpcClient::connect(const std::string& socket_path) {
  auto io = std::make_unique<asio::io_context>();
  stream::socket socket(*io);
  boost::system::error_code ec;
  socket.connect(stream::endpoint(socket_path), ec);
  if (ec) {
    return std::unexpected(
        CallFailure{CallFailure::kUnreachable,
                    "cannot connect to kvtierd at " + socket_path + ": " + ec.message()});
  }
  return RpcClient(std::move(io), std::move(socket));
}

std::expected<json, CallFailure> RpcClient::call(
    const std::string& method, const json& params,
    const std::function<void(const json&)>& on_notification) {
  const long id = next_id_++;
  const std::string line =
      json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump() + "\n";
  boost::system::error_code ec;
  asio::write(socket_, asio::buffer(line), ec);
  if (ec)
    return std::unexpected(
        CallFailure{CallFailure::kUnreachable, "cannot send to kvtierd: " + ec.message()});
  for (;;) {
    const std::size_t n = asio::read_until(socket_, asio::dynamic_buffer(buffer_), '\n', ec);
    if (ec) {
      return std::unexpected(
          CallFailure{CallFailure::kUnreachable, "kvtierd closed the connection: " + ec.message()});
    }
    json msg = json::parse(buffer_.substr(0, n - 1), nullptr, false);
    buffer_.erase(0, n);
    if (msg.is_discarded() || !msg.is_object()) {
      return std::unexpected(
          CallFailure{CallFailure::kProtocol, "kvtierd sent a line that is not JSON"});
    }
    if (!msg.contains("id")) {
      if (on_notification) on_notification(msg);
      continue;
    }
    if (auto err = msg.find("error"); err != msg.end()) {
      const std::string code = err->contains("code") ? err->at("code").dump() : "?";
      const std::string text = err->value("message", std::string("(no message)"));
      return std::unexpected(
          CallFailure{CallFailure::kRpcError, "kvtierd: error " + code + ": " + text});
    }
    if (msg["id"] != id) continue;  // not ours (cannot happen with one call at a time)
    if (!msg.contains("result")) {
      return std::unexpected(
          CallFailure{CallFailure::kProtocol, "kvtierd sent a response without a result"});
    }
    return msg["result"];
  }
}

}  // namespace kvtier::ctl

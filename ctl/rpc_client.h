// A blocking JSON-RPC 2.0 client for kvtierd's Unix socket
// (docs/protocol.md): one request at a time, notifications handed to a
// callback while the response is awaited.
//
// Thread-safety: none; one per thread.
#pragma once

#include <boost/asio.hpp>
#include <expected>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::ctl {

namespace asio = boost::asio;

// Why a call did not return a result.
struct CallFailure {
  enum Kind { kUnreachable, kProtocol, kRpcError } kind;
  std::string message;  // one line, for the terminal
};

class RpcClient {
 public:
  // Connects to the daemon's socket. kUnreachable, naming the path, on failure.
  static std::expected<RpcClient, CallFailure> connect(const std::string& socket_path);

  // Sends one request and waits for its response, passing every notification
  // that arrives meanwhile to `on_notification`. Returns the "result" member,
  // or a kRpcError carrying the daemon's code and message, or kProtocol /
  // kUnreachable when the connection breaks or a line is not a response.
  std::expected<nlohmann::json, CallFailure> call(
      const std::string& method, const nlohmann::json& params,
      const std::function<void(const nlohmann::json&)>& on_notification = {});

 private:
  RpcClient(std::unique_ptr<asio::io_context> io, asio::local::stream_protocol::socket socket);

  std::unique_ptr<asio::io_context> io_;  // on the heap: the socket refers to it
  asio::local::stream_protocol::socket socket_;
  std::string buffer_;  // bytes read past the last line
  long next_id_ = 1;
};

}  // namespace kvtier::ctl

#include "router/line_connection.h"

#include <utility>

namespace kvtier::router {

LineConnection::LineConnection(asio::io_context& io, DaemonAddress address,
                               std::size_t max_output_bytes)
    : socket_(io), address_(std::move(address)), out_(socket_, max_output_bytes) {
  if (std::string auth = address_.auth_line(); !auth.empty())
    before_connected_.push_back(std::move(auth));
}

void LineConnection::start(OnConnected on_connected, OnLine on_line, OnClosed on_closed) {
  on_line_ = std::move(on_line);
  on_closed_ = std::move(on_closed);
  socket_.async_connect(address_.endpoint,
                        [self = shared_from_this(),
                         on_connected = std::move(on_connected)](boost::system::error_code ec) {
                          if (self->closed_) return;
                          if (ec) return self->fail("cannot connect: " + ec.message());
                          self->open_ = true;
                          for (auto& line : std::exchange(self->before_connected_, {}))
                            self->send(std::move(line));
                          if (on_connected) on_connected();
                          if (!self->closed_) self->read();
                        });
}

void LineConnection::send(std::string line) {
  if (closed_) return;
  if (!open_) return before_connected_.push_back(std::move(line));
  const bool queued =
      out_.push(std::move(line), shared_from_this(), [self = shared_from_this()](auto ec) {
        if (ec && !self->closed_) self->fail("write failed: " + ec.message());
      });
  if (!queued) fail("the daemon is not reading its requests");
}

void LineConnection::read() {
  socket_.async_read_some(
      asio::buffer(read_buf_),
      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        if (self->closed_) return;
        if (ec)
          return self->fail(ec == asio::error::eof ? "the daemon closed the connection"
                                                   : "read failed: " + ec.message());
        // A copy: on_line may close() the connection, which drops on_line_
        // while it runs.
        const OnLine on_line = self->on_line_;
        for (auto& item : self->framer_.feed(std::string_view(self->read_buf_.data(), n))) {
          if (item.too_long) return self->fail("a line from the daemon is over 64 MiB");
          on_line(std::move(item.line));
          if (self->closed_) return;
        }
        self->read();
      });
}

void LineConnection::fail(const std::string& why) {
  if (closed_) return;
  auto on_closed = std::move(on_closed_);
  close();
  if (on_closed) on_closed(why);
}

void LineConnection::close() {
  if (closed_) return;
  closed_ = true;
  open_ = false;
  on_line_ = nullptr;
  on_closed_ = nullptr;
  out_.clear();
  boost::system::error_code ignored;
  socket_.close(ignored);
}

}  // namespace kvtier::router

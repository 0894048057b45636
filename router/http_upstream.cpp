#include "router/http_upstream.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>

namespace kvtier::router {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using error_code = boost::system::error_code;
using stream = asio::generic::stream_protocol;

struct HttpUpstream::Impl {
  explicit Impl(asio::io_context& io) : socket(io) {}
  stream::socket socket;
  beast::flat_buffer buffer;
  bhttp::request<bhttp::string_body> request;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser;
  // The parser keeps a reference to its chunk callback: it lives here.
  std::function<std::size_t(std::uint64_t, beast::string_view, error_code&)> on_chunk;
};

HttpUpstream::HttpUpstream(asio::io_context& io, Handlers handlers)
    : impl_(std::make_shared<Impl>(io)), handlers_(std::move(handlers)) {}

std::shared_ptr<HttpUpstream> HttpUpstream::start(asio::io_context& io,
                                                  const DaemonAddress& address,
                                                  const wire::http::Request& request,
                                                  Handlers handlers) {
  auto up = std::make_shared<HttpUpstream>(io, std::move(handlers));
  up->begin(address, request);
  return up;
}

void HttpUpstream::begin(const DaemonAddress& address, const wire::http::Request& request) {
  bhttp::request<bhttp::string_body>& req = impl_->request;
  req.method_string(request.method);
  req.target(request.target);
  req.version(11);
  req.set(bhttp::field::host, "kvtier");
  if (const std::string type = request.header("content-type"); !type.empty())
    req.set(bhttp::field::content_type, type);
  if (address.tcp && !address.api_key.empty())
    req.set(bhttp::field::authorization, "Bearer " + address.api_key);
  req.keep_alive(false);
  req.body() = request.body;
  req.prepare_payload();
  impl_->socket.async_connect(address.endpoint, [self = shared_from_this()](error_code ec) {
    if (self->closed_) return;
    if (ec) return self->fail("cannot connect: " + ec.message());
    bhttp::async_write(self->impl_->socket, self->impl_->request,
                       [self](error_code ec, std::size_t) {
                         if (self->closed_) return;
                         if (ec) return self->fail("cannot send the request: " + ec.message());
                         self->read_head();
                       });
  });
}

void HttpUpstream::read_head() {
  impl_->parser.emplace();
  impl_->parser->body_limit(kMaxBodyBytes);
  bhttp::async_read_header(
      impl_->socket, impl_->buffer, *impl_->parser,
      [self = shared_from_this()](error_code ec, auto) {
        if (self->closed_) return;
        if (ec) return self->fail("no answer: " + ec.message());
        const auto& head = self->impl_->parser->get();
        const bool events =
            head.result() == bhttp::status::ok &&
            beast::iequals(head[bhttp::field::content_type].substr(0, 17), "text/event-stream");
        if (!events) return self->read_body();
        self->streaming_ = true;
        self->impl_->parser->body_limit(std::numeric_limits<std::uint64_t>::max());
        self->impl_->on_chunk = [raw = self.get()](std::uint64_t, beast::string_view body,
                                                   error_code&) {
          raw->events_.append(body.data(), body.size());
          return body.size();
        };
        self->impl_->parser->on_chunk_body(self->impl_->on_chunk);
        if (self->handlers_.on_stream_begin) self->handlers_.on_stream_begin();
        if (!self->closed_) self->read_stream();
      });
}

void HttpUpstream::read_body() {
  bhttp::async_read(impl_->socket, impl_->buffer, *impl_->parser,
                    [self = shared_from_this()](error_code ec, std::size_t) {
                      if (self->closed_) return;
                      if (ec) return self->fail("the answer was cut short: " + ec.message());
                      auto res = self->impl_->parser->release();
                      wire::http::Response r;
                      r.status = static_cast<int>(res.result_int());
                      r.content_type = std::string(res[bhttp::field::content_type]);
                      if (const auto retry = res.find(bhttp::field::retry_after);
                          retry != res.end())
                        r.headers.emplace_back("Retry-After", std::string(retry->value()));
                      if (const auto allow = res.find(bhttp::field::allow); allow != res.end())
                        r.headers.emplace_back("Allow", std::string(allow->value()));
                      r.body = std::move(res.body());
                      auto done = std::move(self->handlers_.on_response);
                      self->close();
                      if (done) done(std::move(r));
                    });
}

void HttpUpstream::read_stream() {
  bhttp::async_read_some(impl_->socket, impl_->buffer, *impl_->parser,
                         [self = shared_from_this()](error_code ec, std::size_t) {
                           if (self->closed_) return;
                           if (ec) return self->fail("the stream was cut short: " + ec.message());
                           self->split_events();
                           if (self->closed_) return;
                           if (!self->impl_->parser->is_done()) return self->read_stream();
                           auto end = std::move(self->handlers_.on_end);
                           self->close();
                           if (end) end();
                         });
}

void HttpUpstream::split_events() {
  std::size_t from = 0;
  for (std::size_t blank; (blank = events_.find("\n\n", from)) != std::string::npos;
       from = blank + 2) {
    std::string_view event(events_.data() + from, blank - from);
    constexpr std::string_view kData = "data: ";
    if (event.substr(0, kData.size()) != kData) continue;  // no data: a comment, say
    if (handlers_.on_event) handlers_.on_event(event.substr(kData.size()));
    if (closed_) return;
  }
  events_.erase(0, from);
}

void HttpUpstream::fail(const std::string& why) {
  auto failed = std::move(handlers_.on_failed);
  const bool delivered = streaming_;
  close();
  if (failed) failed(why, delivered);
}

void HttpUpstream::close() {
  if (closed_) return;
  closed_ = true;  // the handlers stay: one of them may be the caller
  error_code ignored;
  impl_->socket.shutdown(stream::socket::shutdown_both, ignored);
  impl_->socket.close(ignored);
}

}  // namespace kvtier::router

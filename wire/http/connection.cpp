#include "wire/http/connection.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "wire/http/errors.h"
#include "wire/http/page.h"
#include "wire/log.h"
#include "wire/write_queue.h"

namespace kvtier::wire::http {

namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using error_code = boost::system::error_code;

// Bytes of pipelined requests kept while an answer is made; past them the
// connection stops reading until the answer is done.
constexpr std::size_t kMaxBufferedBytes = 64 << 10;

template <class Protocol>
class ConnectionImpl final : public Connection,
                             public Exchange,
                             public std::enable_shared_from_this<ConnectionImpl<Protocol>> {
 public:
  ConnectionImpl(typename Protocol::socket socket, Service& service, ConnectionOptions options,
                 ClosedHandler on_closed)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        service_(service),
        options_(std::move(options)),
        on_closed_(std::move(on_closed)),
        number_(next_connection_number()),
        out_(socket_, options_.max_output_bytes) {}

  void start(std::string already_read) override {
    in_ = std::move(already_read);
    next_request();
  }

  void stop() override {
    if (closed_ || stopping_) return;
    stopping_ = true;
    if (!out_.writing()) return close();
    timer_.expires_after(std::chrono::seconds(1));
    timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (!ec) self->close();
    });
  }

  // Exchange.
  void respond(Response r) override {
    if (closed_ || state_ != State::kAnswering) return;
    service_.answered(path_, r.status);
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), 11};
    res.set(bhttp::field::server, "kvtier");
    res.set(bhttp::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res.set(name, value);
    res.keep_alive(keep_alive_);
    res.body() = std::move(r.body);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    send(std::move(os).str());
    answered();
  }

  void stream_begin() override {
    if (closed_ || state_ != State::kAnswering) return;
    state_ = State::kStreaming;
    service_.answered(path_, 200);
    bhttp::response<bhttp::empty_body> res{bhttp::status::ok, 11};
    res.set(bhttp::field::server, "kvtier");
    res.set(bhttp::field::content_type, "text/event-stream");
    res.set(bhttp::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    std::ostringstream os;
    os << res.base();
    send(std::move(os).str());
  }

  void stream_event(std::string_view data) override {
    if (closed_ || state_ != State::kStreaming) return;
    std::string event = "data: ";
    event.append(data);
    event += "\n\n";
    send(beast::buffers_to_string(bhttp::make_chunk(asio::buffer(event))));
  }

  void stream_end() override {
    if (closed_ || state_ != State::kStreaming) return;
    send(beast::buffers_to_string(bhttp::make_chunk_last()));
    answered();
  }

  void post(std::function<void()> fn) override {
    asio::post(socket_.get_executor(), [self = this->shared_from_this(), fn = std::move(fn)] {
      if (!self->closed_) fn();
    });
  }
  void track(RequestId id) override { requests_.insert(id); }
  void untrack(RequestId id) override { requests_.erase(id); }
  RequestOwner owner() const override {
    return {number_, options_.peer ? std::optional<uid_t>(options_.peer->uid) : std::nullopt};
  }

 private:
  enum class State { kReading, kAnswering, kStreaming };

  // Waits for (or parses what is buffered of) the next request.
  void next_request() {
    state_ = State::kReading;
    continued_ = false;
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(service_.max_body_bytes());
    parser_->eager(true);
    arm_timer();
    parse();
    read();
  }

  // From now (the start of a wait for a request, or its first byte), the
  // request has http_timeout to arrive.
  void arm_timer() {
    const double seconds = service_.request_timeout();
    timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(
        std::chrono::duration<double>(seconds)));
    timer_.async_wait([self = this->shared_from_this(), seconds](error_code ec) {
      if (ec || self->closed_ || self->state_ != State::kReading) return;
      if (self->in_.empty() && !self->parser_->got_some()) {
        self->close();  // an idle keep-alive connection
        return;
      }
      char text[32];
      std::snprintf(text, sizeof text, "%g", seconds);
      self->fail(408, std::string("the request did not arrive whole within http_timeout (") + text +
                          " s)");
    });
  }

  void read() {
    if (reading_ || closed_ || stopping_) return;
    if (state_ != State::kReading && in_.size() >= kMaxBufferedBytes) return;
    reading_ = true;
    socket_.async_read_some(asio::buffer(read_buf_),
                            [self = this->shared_from_this()](error_code ec, std::size_t n) {
                              self->reading_ = false;
                              if (self->closed_) return;
                              if (ec) {
                                if (ec != asio::error::eof)
                                  log_debug("HTTP connection read failed: " + ec.message());
                                self->close();  // a client that left: its generations are cancelled
                                return;
                              }
                              const bool first = self->in_.empty() && !self->parser_->got_some();
                              self->in_.append(self->read_buf_.data(), n);
                              if (self->state_ == State::kReading) {
                                if (first) self->arm_timer();
                                self->parse();
                              }
                              self->read();
                            });
  }

  void parse() {
    if (state_ != State::kReading || closed_) return;
    error_code ec;
    const std::size_t used = parser_->put(asio::buffer(in_), ec);
    in_.erase(0, used);
    if (ec == bhttp::error::body_limit)
      return fail(413, "the request body is longer than max_line_bytes (" +
                           std::to_string(service_.max_body_bytes()) + ")");
    if (ec == bhttp::error::header_limit)
      return fail(431, "the request's header block is longer than " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
    if (ec && ec != bhttp::error::need_more)
      return fail(400, "malformed HTTP request: " + ec.message());
    if (parser_->is_done()) {
      timer_.cancel();
      return handle(parser_->release());
    }
    // A client that asks before sending its body (curl does past 1 KiB) is
    // told to go on, rather than left to wait a second for it.
    if (parser_->is_header_done() && !continued_) {
      continued_ = true;
      const auto expect = parser_->get().find(bhttp::field::expect);
      if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue"))
        send("HTTP/1.1 100 Continue\r\n\r\n");
    }
  }

  void handle(bhttp::request<bhttp::string_body> req) {
    state_ = State::kAnswering;
    keep_alive_ = req.keep_alive() && !stopping_;
    Request r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    for (const auto& field : req) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = std::string(field.value());
    }
    r.body = std::move(req.body());
    path_ = std::string(r.path());
    if (!options_.api_key.empty() && !open_without_key(r)) {
      const std::string auth = r.header("authorization");
      if (auth.rfind("Bearer ", 0) != 0 || !same_secret(auth.substr(7), options_.api_key)) {
        Response denied = error_response(401,
                                         "a valid API key is required (Authorization: "
                                         "Bearer <key>)",
                                         "", "invalid_api_key");
        denied.headers.emplace_back("WWW-Authenticate", "Bearer");
        return respond(std::move(denied));
      }
    }
    service_.dispatch(r, this->shared_from_this());
  }

  // The answer to the current request is complete (queued).
  void answered() {
    if (!keep_alive_) {
      stopping_ = true;  // close once it is written
      if (!out_.writing()) close();
      return;
    }
    next_request();
  }

  // Answers the current request with an error and closes: after a request
  // that did not parse, the stream cannot be trusted.
  void fail(int status, const std::string& why) {
    log_debug("HTTP request refused (" + std::to_string(status) + "): " + why);
    state_ = State::kAnswering;
    keep_alive_ = false;
    path_.clear();  // no route: "other"
    respond(error_response(status, why));
  }

  void send(std::string bytes) {
    if (closed_) return;
    const std::size_t size = bytes.size();
    if (!out_.push(std::move(bytes), this->shared_from_this(),
                   [this](error_code ec) { written(ec); })) {
      log_warning("dropping an HTTP client that does not read its answers (" +
                  std::to_string(out_.queued_bytes() + size) + " bytes queued)");
      close();
    }
  }

  // A write of out_ failed, or out_ went empty.
  void written(error_code ec) {
    if (closed_) return;
    if (ec) {
      log_debug("HTTP connection write failed: " + ec.message());
      close();
    } else if (stopping_) {
      close();
    }
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    timer_.cancel();
    socket_.shutdown(asio::socket_base::shutdown_both, ignored);
    socket_.close(ignored);
    out_.clear();
    // Nobody is left to read these results: give their KV back now. Taken
    // out first: a service's cancel may untrack() the id it cancels (the
    // router's does), which must not touch the set being walked.
    for (RequestId id : std::exchange(requests_, {})) service_.cancel(id, owner());
    if (on_closed_) on_closed_(this);
  }

  typename Protocol::socket socket_;
  asio::steady_timer timer_;
  Service& service_;
  ConnectionOptions options_;
  ClosedHandler on_closed_;
  std::uint64_t number_;

  State state_ = State::kReading;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string in_;  // read, not yet parsed
  std::array<char, 16384> read_buf_;
  bool reading_ = false;
  bool keep_alive_ = true;
  bool continued_ = false;  // the current request's header was looked at for Expect
  std::string path_;        // of the request being answered
  WriteQueue<typename Protocol::socket> out_;
  bool stopping_ = false;  // no more requests; close once out_ is written
  bool closed_ = false;
  std::unordered_set<RequestId> requests_;
};

}  // namespace

std::shared_ptr<Connection> Connection::make(asio::local::stream_protocol::socket socket,
                                             Service& service, ConnectionOptions options,
                                             ClosedHandler on_closed) {
  return std::make_shared<ConnectionImpl<asio::local::stream_protocol>>(
      std::move(socket), service, std::move(options), std::move(on_closed));
}

std::shared_ptr<Connection> Connection::make(asio::ip::tcp::socket socket, Service& service,
                                             ConnectionOptions options, ClosedHandler on_closed) {
  return std::make_shared<ConnectionImpl<asio::ip::tcp>>(std::move(socket), service,
                                                         std::move(options), std::move(on_closed));
}

std::shared_ptr<Connection> Connection::make(asio::generic::stream_protocol::socket socket,
                                             Service& service, ConnectionOptions options,
                                             ClosedHandler on_closed) {
  return std::make_shared<ConnectionImpl<asio::generic::stream_protocol>>(
      std::move(socket), service, std::move(options), std::move(on_closed));
}

std::string_view Request::path() const {
  const std::string_view t = target;
  return t.substr(0, t.find('?'));
}

std::string Request::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

}  // namespace kvtier::wire::http

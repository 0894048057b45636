// What a connection has to send its client, written one piece at a time in
// order. Bounded: past max_bytes queued and unwritten the client is not
// reading, push() refuses, and its owner drops the connection, so a stalled
// reader costs the daemon bounded memory and never stalls the engine (which
// only posts to the connection). JSON-RPC sessions and HTTP connections
// queue through one.
//
// Thread-safety: on its connection's io thread only.
#pragma once

#include <boost/asio.hpp>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>

namespace kvtier::wire {

template <class Socket>
class WriteQueue {
 public:
  // Called when a write failed (`ec` set) or the queue has gone empty.
  using Done = std::function<void(boost::system::error_code ec)>;

  // `socket` outlives the queue; `done` is the owner's, called on the io
  // thread while `keep` (the owner, shared) is held.
  WriteQueue(Socket& socket, std::size_t max_bytes) : socket_(socket), max_bytes_(max_bytes) {}

  // Queues `bytes` and starts writing. False, and nothing queued, when the
  // client already has more than max_bytes waiting.
  [[nodiscard]] bool push(std::string bytes, std::shared_ptr<void> keep, Done done) {
    if (queued_bytes_ + bytes.size() > max_bytes_) return false;
    queued_bytes_ += bytes.size();
    pieces_.push_back(std::move(bytes));
    if (!writing_) write_front(std::move(keep), std::move(done));
    return true;
  }

  // Bytes queued and not yet written, the piece being written included.
  std::size_t queued_bytes() const { return queued_bytes_; }
  bool writing() const { return writing_; }
  // Forgets what is queued (the connection is closing).
  void clear() {
    pieces_.clear();
    queued_bytes_ = 0;
  }

 private:
  void write_front(std::shared_ptr<void> keep, Done done) {
    writing_ = true;
    boost::asio::async_write(socket_, boost::asio::buffer(pieces_.front()),
                             [this, keep = std::move(keep), done = std::move(done)](
                                 boost::system::error_code ec, std::size_t) mutable {
                               writing_ = false;
                               if (pieces_.empty())
                                 return;  // cleared meanwhile: the connection is gone
                               queued_bytes_ -= pieces_.front().size();
                               pieces_.pop_front();
                               if (!ec && !pieces_.empty())
                                 return write_front(std::move(keep), std::move(done));
                               done(ec);
                             });
  }

  Socket& socket_;
  std::size_t max_bytes_;
  std::deque<std::string> pieces_;
  std::size_t queued_bytes_ = 0;
  bool writing_ = false;
};

}  // namespace kvtier::wire

// Splits a byte stream into '\n'-terminated lines under a length limit.
//
// No I/O: a session feeds it whatever read_some returned and gets back
// complete lines and "too long" markers. A line longer than max_line_bytes is
// not buffered: its bytes are discarded up to the next '\n', and it is
// reported once, so one oversized request costs the client an error reply,
// not its connection, and cannot make the daemon buffer without bound.
// A trailing '\r' is stripped, so `socat` or telnet-style clients work.
//
// Thread-safety: none; one per connection.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::wire {

class LineFramer {
 public:
  struct Item {
    std::string line;       // without its '\n'; empty when too_long
    bool too_long = false;  // a line over the limit was dropped here
  };

  explicit LineFramer(std::size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  // Appends `bytes` and returns the items they completed, in order. Empty
  // lines (blank keep-alives) are skipped.
  std::vector<Item> feed(std::string_view bytes);

  // Bytes of an unfinished line held now (at most max_line_bytes).
  std::size_t buffered() const { return partial_.size(); }

  // Changes the limit from the next feed() on (the max_line_bytes runtime
  // setting). An unfinished line already over a lower limit is reported
  // then.
  void set_max_line_bytes(std::size_t max_line_bytes) { max_line_bytes_ = max_line_bytes; }
  std::size_t max_line_bytes() const { return max_line_bytes_; }

 private:
  std::size_t max_line_bytes_;
  std::string partial_;
  bool discarding_ = false;  // inside an over-long line, waiting for its '\n'
};

}  // namespace kvtier::wire

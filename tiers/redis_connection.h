// One connection to one Redis server, through hiredis's blocking API on the
// calling thread (the remote store's I/O thread: never the engine's).
//
// Commands go in pipelined rounds: round() writes every command, then reads
// every reply, so a round of 64 GETs costs one round trip, not 64. Each
// round has one deadline for the whole of it.
//
// A connection that failed stays failed: past its deadline, on an I/O or
// protocol error, a round returns the reason and broken() is true from then
// on (its replies may be out of step with its commands); the owner makes a
// new one. Error replies (-ERR, -MOVED, -NOAUTH...) are replies, not
// failures: the connection stays in step.
//
// A round may hand its string replies to a ValueSink instead of copying
// them into RedisReply::str: the sink sees each one where hiredis read it,
// as soon as it is complete (while later replies are still arriving), so a
// block-sized value is checked and copied to where it belongs once.
#pragma once

#include <chrono>
#include <cstddef>
#include <expected>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tiers/redis_address.h"

struct redisContext;

namespace kvtier::tiers {

struct RedisReply {
  enum class Kind { kString, kStatus, kInteger, kNil, kError, kArray };
  Kind kind = Kind::kNil;
  std::string str;  // kString, kStatus, kError
  long long integer = 0;
  std::vector<RedisReply> elements;  // kArray

  bool is_error() const { return kind == Kind::kError; }
};

// Offered the bytes of the string reply to command `command` of a round
// (valid for the call only); true takes them, and that reply is then a
// kString with an empty str. Runs on the round's thread, inside hiredis's
// parser: it must not throw, and must not call into the connection.
using ValueSink = std::function<bool(std::size_t command, std::span<const std::byte> value)>;

class RedisConnection {
 public:
  // A command's arguments, binary-safe; they must outlive round().
  using Command = std::vector<std::string_view>;

  // Connects within `timeout` and, with a password, authenticates (AUTH);
  // fails with "ADDRESS: reason".
  static std::expected<std::unique_ptr<RedisConnection>, std::string> connect(
      const RedisAddress& address, std::chrono::milliseconds timeout,
      const std::string& password = {});
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // A reply per command, in order, or why the round failed.
  std::expected<std::vector<RedisReply>, std::string> round(std::span<const Command> commands,
                                                            std::chrono::milliseconds deadline,
                                                            const ValueSink& sink = {});
  bool broken() const { return !broken_why_.empty(); }
  const RedisAddress& address() const { return address_; }

 private:
  RedisConnection(RedisAddress address, redisContext* context);
  std::string fail(const std::string& why);
  // redisGetReply's work, reading up to kReadBytes a system call instead of
  // hiredis's 16 KiB (a block-sized value in a few reads, not 75): the next
  // reply, or why there is none.
  std::string next_reply(void** reply);

  static constexpr std::size_t kReadBytes = 1 << 20;

  RedisAddress address_;
  redisContext* context_;
  std::unique_ptr<char[]> read_buffer_;  // kReadBytes, from the first read on
  std::string broken_why_;
};

}  // namespace kvtier::tiers

#include "tiers/redis_connection.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvtier::tiers {

namespace {

// next_reply's answer when the socket's timeout (the round's deadline) ran out.
constexpr const char* kReadTimedOut = "timed out reading";

using Clock = std::chrono::steady_clock;

timeval to_timeval(std::chrono::microseconds us) {
  us = std::max(us, std::chrono::microseconds(1000));  // 0 would mean "no timeout"
  return timeval{.tv_sec = static_cast<time_t>(us.count() / 1'000'000),
                 .tv_usec = static_cast<suseconds_t>(us.count() % 1'000'000)};
}

// hiredis writes with write(2), so a server that has gone raises SIGPIPE,
// which ends a process that does not ignore it (kvtierd does; a test or
// another program linking the tiers may not). A round blocks it on its
// thread, and takes a SIGPIPE the round raised before unblocking it.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    if (sigismember(&old_, SIGPIPE)) return;  // blocked before: left as it was
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec now{};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_, old_;
};

// hiredis builds our RedisReply directly (its reader's object functions),
// so a value is copied once from the read buffer into the reply's string,
// not once into hiredis's reply and again into ours: for block-sized values
// that copy is what the round costs beside the network. An array's elements
// are made in place in their parent (sized by createArray, never resized),
// so the pointers hiredis keeps to them stay valid. Allocation failures and
// absurd array sizes return null, which hiredis reports as out of memory;
// no exception crosses its C code.
constexpr long long kMaxArrayElements = 1 << 20;

// What the reader's functions know of the round being read: its sink, and
// which command the reply being read answers. The reader's privdata while a
// round reads; null otherwise.
struct RoundReading {
  const ValueSink* sink = nullptr;
  std::size_t command = 0;
};

// The type hiredis counts an array's elements in (int in 0.14, size_t
// later).
template <typename>
struct SecondParameter;
template <typename R, typename A, typename B>
struct SecondParameter<R (*)(A, B)> {
  using type = B;
};
using ArrayCount = SecondParameter<decltype(redisReplyObjectFunctions::createArray)>::type;

void* attach(const redisReadTask* task, RedisReply&& value) noexcept {
  if (task->parent != nullptr) {
    auto* parent = static_cast<RedisReply*>(task->parent->obj);
    RedisReply& slot = parent->elements[static_cast<std::size_t>(task->idx)];
    slot = std::move(value);
    return &slot;
  }
  return new (std::nothrow) RedisReply(std::move(value));
}

RedisReply::Kind kind_of(int type) {
  switch (type) {
    case REDIS_REPLY_STRING:
      return RedisReply::Kind::kString;
    case REDIS_REPLY_STATUS:
      return RedisReply::Kind::kStatus;
    case REDIS_REPLY_ERROR:
      return RedisReply::Kind::kError;
    default:
      return RedisReply::Kind::kNil;
  }
}

redisReplyObjectFunctions reply_functions = {
    .createString = [](const redisReadTask* task, char* str, std::size_t len) noexcept -> void* {
      try {
        RedisReply r;
        r.kind = kind_of(task->type);
        const auto* reading = static_cast<const RoundReading*>(task->privdata);
        if (task->parent == nullptr && task->type == REDIS_REPLY_STRING && reading != nullptr &&
            (*reading->sink)(reading->command, std::as_bytes(std::span(str, len))))
          return attach(task, std::move(r));
        r.str.assign(str, len);
        return attach(task, std::move(r));
      } catch (const std::bad_alloc&) {
        return nullptr;
      }
    },
    .createArray = [](const redisReadTask* task, ArrayCount elements) noexcept -> void* {
      if (static_cast<long long>(elements) < 0 ||
          static_cast<long long>(elements) > kMaxArrayElements)
        return nullptr;
      try {
        RedisReply r;
        r.kind = RedisReply::Kind::kArray;
        r.elements.resize(static_cast<std::size_t>(elements));
        return attach(task, std::move(r));
      } catch (const std::bad_alloc&) {
        return nullptr;
      }
    },
    .createInteger = [](const redisReadTask* task, long long value) noexcept -> void* {
      RedisReply r;
      r.kind = RedisReply::Kind::kInteger;
      r.integer = value;
      return attach(task, std::move(r));
    },
    .createNil = [](const redisReadTask* task) noexcept -> void* {
      return attach(task, RedisReply{});
    },
    .freeObject = [](void* reply) noexcept { delete static_cast<RedisReply*>(reply); },
};

}  // namespace

RedisConnection::RedisConnection(RedisAddress address, redisContext* context)
    : address_(std::move(address)), context_(context) {}

RedisConnection::~RedisConnection() { redisFree(context_); }

std::expected<std::unique_ptr<RedisConnection>, std::string> RedisConnection::connect(
    const RedisAddress& address, std::chrono::milliseconds timeout, const std::string& password) {
  const timeval tv = to_timeval(timeout);
  redisContext* c = address.is_unix()
                        ? redisConnectUnixWithTimeout(address.unix_path.c_str(), tv)
                        : redisConnectWithTimeout(address.host.c_str(), address.port, tv);
  if (c == nullptr) return std::unexpected(address.to_string() + ": out of memory");
  if (c->err != 0) {
    std::string why = address.to_string() + ": " + c->errstr;
    redisFree(c);
    return std::unexpected(why);
  }
  // Keep the reader's buffer between replies: hiredis frees it once more
  // than 16 KiB sit unused, so every block-sized value would grow it again
  // from nothing (reallocations, copies and page faults per value).
  c->reader->maxbuf = 0;
  c->reader->fn = &reply_functions;
  std::unique_ptr<RedisConnection> connection(new RedisConnection(address, c));
  if (!password.empty()) {
    const Command auth = {"AUTH", password};
    auto replies = connection->round(std::span(&auth, 1), timeout);
    if (!replies) return std::unexpected(replies.error());
    if ((*replies)[0].is_error())
      return std::unexpected(address.to_string() + ": AUTH: " + (*replies)[0].str);
  }
  return connection;
}

std::string RedisConnection::next_reply(void** reply) {
  if (redisGetReplyFromReader(context_, reply) != REDIS_OK) return context_->errstr;
  if (*reply != nullptr) return {};
  for (int done = 0; !done;)  // the round's commands, all sent first
    if (redisBufferWrite(context_, &done) != REDIS_OK) return context_->errstr;
  if (!read_buffer_) read_buffer_ = std::make_unique<char[]>(kReadBytes);
  while (*reply == nullptr) {
    const ssize_t n = ::read(context_->fd, read_buffer_.get(), kReadBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return kReadTimedOut;
    if (n < 0) return std::string("read: ") + std::strerror(errno);
    if (n == 0) return "the server closed the connection";
    if (redisReaderFeed(context_->reader, read_buffer_.get(), static_cast<std::size_t>(n)) !=
            REDIS_OK ||
        redisGetReplyFromReader(context_, reply) != REDIS_OK)
      return context_->errstr;
  }
  return {};
}

std::string RedisConnection::fail(const std::string& why) {
  broken_why_ = address_.to_string() + ": " + why;
  return broken_why_;
}

std::expected<std::vector<RedisReply>, std::string> RedisConnection::round(
    std::span<const Command> commands, std::chrono::milliseconds deadline, const ValueSink& sink) {
  if (broken()) return std::unexpected(broken_why_);
  const SigpipeBlock no_sigpipe;
  const auto end = Clock::now() + deadline;
  const auto late = [&] {
    return std::unexpected(
        fail("no reply within the deadline (" + std::to_string(deadline.count()) + " ms)"));
  };
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const Command& command : commands) {
    argv.clear();
    lengths.clear();
    for (std::string_view arg : command) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                               lengths.data()) != REDIS_OK)
      return std::unexpected(fail(context_->errstr));
  }
  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  RoundReading reading{&sink};
  redisReader* reader = context_->reader;
  reader->privdata = sink ? &reading : nullptr;
  const struct Unset {
    redisReader* reader;
    ~Unset() { reader->privdata = nullptr; }
  } unset{reader};
  for (std::size_t i = 0; i < commands.size(); ++i) {
    reading.command = i;
    // What is left of the round's deadline bounds each blocking read and
    // write (hiredis sets it as the socket's timeouts).
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(end - Clock::now());
    if (left.count() <= 0) return late();
    if (redisSetTimeout(context_, to_timeval(left)) != REDIS_OK)
      return std::unexpected(fail("cannot set the socket's timeout"));
    void* raw = nullptr;
    if (const auto why = next_reply(&raw); !why.empty() || raw == nullptr) {
      // The kernel counts the socket's timeout in ticks, so it can end a
      // little before `end` by this clock: a timed-out read is the deadline.
      if (Clock::now() >= end || why == kReadTimedOut) return late();
      return std::unexpected(fail(why.empty() ? "no reply" : why));
    }
    std::unique_ptr<RedisReply> reply(static_cast<RedisReply*>(raw));  // reply_functions' own
    replies.push_back(std::move(*reply));
  }
  return replies;
}

}  // namespace kvtier::tiers

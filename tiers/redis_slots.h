// How Redis Cluster places keys, as its specification defines it: a key's
// hash slot (CRC16 of the key, or of its {hash tag}, mod 16384), the slot
// map a node gives in answer to CLUSTER SLOTS, and the MOVED / ASK
// redirections a node answers a command whose slot it does not serve.
//
// Everything here parses what a server sent, so nothing is trusted: a
// reply that is not what the specification says is an error that says why,
// never an out-of-range slot or port.
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tiers/redis_address.h"
#include "tiers/redis_connection.h"

namespace kvtier::tiers {

inline constexpr int kRedisSlots = 16384;

// The hash slot of `key`: CRC16 (XMODEM) of the key, or of the part between
// its first '{' and the next '}' when that part is not empty, mod 16384.
int redis_key_slot(std::string_view key);

// Slots [first, last] and the master that serves them.
struct SlotRange {
  int first = 0, last = 0;
  RedisAddress master;

  bool operator==(const SlotRange&) const = default;
};

// The ranges of a CLUSTER SLOTS reply got from `asked`. A master announced
// with an empty host is on `asked`'s host (Redis's "same endpoint as this
// one"); one whose endpoint is unknown ("?") is left out: its slots are
// served by nobody until the map is asked for again.
std::expected<std::vector<SlotRange>, std::string> parse_cluster_slots(const RedisReply& reply,
                                                                       const RedisAddress& asked);

// "-MOVED 3999 127.0.0.1:6381" and "-ASK 3999 127.0.0.1:6381", from `from`.
struct Redirect {
  bool ask = false;  // ASK: this command only, after ASKING; MOVED: the slot's new home
  int slot = 0;
  RedisAddress to;
};
// The redirection an error reply is, or nullopt if it is none (or is
// malformed: then it is an error like any other).
std::optional<Redirect> parse_redirect(const RedisReply& reply, const RedisAddress& from);

}  // namespace kvtier::tiers

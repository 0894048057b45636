// What the remote tier's store tests share: options for a test's servers
// (a short backoff, so breakers close within a test), opening, and waiting
// for the completions of tickets.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "tiers/redis_store.h"

namespace kvtier::test_util {

inline tiers::RedisStoreOptions redis_store_options(std::vector<tiers::RedisAddress> addresses,
                                                    std::size_t block_bytes,
                                                    std::uint64_t format_tag) {
  using namespace std::chrono_literals;
  tiers::RedisStoreOptions o;
  o.addresses = std::move(addresses);
  o.key_namespace = "test";
  o.timeout = 2000ms;
  o.block_bytes = block_bytes;
  o.format_tag = format_tag;
  o.backoff_initial = 50ms;
  o.backoff_max = 200ms;
  return o;
}

// The store, or null with the reason as a test failure.
inline std::unique_ptr<tiers::RedisStore> open_redis_store(const tiers::RedisStoreOptions& o) {
  auto store = tiers::RedisStore::open(o);
  EXPECT_TRUE(store.has_value()) << store.error();
  return store ? std::move(*store) : nullptr;
}

// The completion of each ticket, in ticket order, once all are in.
inline std::vector<tiers::StoreStatus> finish(tiers::BlockStore& store,
                                              const std::vector<std::uint64_t>& tickets) {
  store.drain();
  const std::vector<tiers::StoreCompletion> done = store.poll();
  std::vector<tiers::StoreStatus> out;
  for (std::uint64_t t : tickets) {
    auto it = std::ranges::find(done, t, &tiers::StoreCompletion::ticket);
    out.push_back(it == done.end() ? tiers::StoreStatus::kUnavailable : it->status);
    EXPECT_NE(it, done.end()) << "no completion for ticket " << t;
  }
  return out;
}

}  // namespace kvtier::test_util

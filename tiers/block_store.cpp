#include "tiers/block_store.h"

namespace kvtier::tiers {

const char* to_string(StoreStatus status) {
  switch (status) {
    case StoreStatus::kOk:
      return "ok";
    case StoreStatus::kNotFound:
      return "not found";
    case StoreStatus::kChecksumMismatch:
      return "checksum mismatch";
    case StoreStatus::kIoError:
      return "I/O error";
    case StoreStatus::kNoSpace:
      return "no space";
    case StoreStatus::kUnavailable:
      return "unavailable";
  }
  return "?";
}

void StoreStats::set_latencies(const util::LatencyStats& reads, const util::LatencyStats& writes) {
  const util::LatencySummary r = reads.summary(), w = writes.summary();
  mean_read_us = r.mean_us;
  p99_read_us = r.p99_us;
  mean_write_us = w.mean_us;
  p99_write_us = w.p99_us;
}

}  // namespace kvtier::tiers

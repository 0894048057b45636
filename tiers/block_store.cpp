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

}  // namespace kvtier::tiers

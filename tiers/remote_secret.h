// The secret a fleet of daemons shares to authenticate what they put in the
// remote tier (setting `remote_secret`: a file holding it). With it, every
// remote value carries an HMAC-SHA256 over its key and bytes
// (tiers/remote_value.h), so a writer without the secret cannot make other
// daemons serve KV of its choosing.
//
// The file holds the secret's bytes as they are (one trailing newline, as
// editors leave, is not part of it): at least kMinBytes, at most kMaxBytes.
// Like ssh's keys, a file others may read is refused: a secret the whole
// machine can read authenticates nothing.
#pragma once

#include <array>
#include <cstddef>
#include <expected>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kvtier::tiers {

class RemoteSecret {
 public:
  static constexpr std::size_t kMinBytes = 16, kMaxBytes = 4096, kMacBytes = 32;
  using Mac = std::array<std::byte, kMacBytes>;

  static std::expected<RemoteSecret, std::string> from_file(const std::string& path);
  static std::expected<RemoteSecret, std::string> from_bytes(std::span<const std::byte> bytes);

  // HMAC-SHA256 under the secret over the parts, in order, as one message;
  // nullopt should OpenSSL fail (then nothing is written or accepted).
  std::optional<Mac> mac(std::initializer_list<std::span<const std::byte>> parts) const;
  // Whether `claimed` is that HMAC (compared in constant time); false
  // should OpenSSL fail.
  bool verify(std::span<const std::byte> claimed,
              std::initializer_list<std::span<const std::byte>> parts) const;

 private:
  explicit RemoteSecret(std::vector<std::byte> key) : key_(std::move(key)) {}
  std::vector<std::byte> key_;
};

}  // namespace kvtier::tiers

#include "tiers/remote_secret.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <memory>

#include "util/private_file.h"

namespace kvtier::tiers {

std::expected<RemoteSecret, std::string> RemoteSecret::from_file(const std::string& path) {
  const auto text = util::read_private_file("remote_secret", path, kMaxBytes);
  if (!text) return std::unexpected(text.error());
  auto secret = from_bytes(std::as_bytes(std::span(*text)));
  if (!secret) return std::unexpected("remote_secret " + path + ": " + secret.error());
  return secret;
}

std::expected<RemoteSecret, std::string> RemoteSecret::from_bytes(
    std::span<const std::byte> bytes) {
  if (bytes.size() < kMinBytes || bytes.size() > kMaxBytes)
    return std::unexpected("a secret has " + std::to_string(kMinBytes) + " to " +
                           std::to_string(kMaxBytes) + " bytes, this one " +
                           std::to_string(bytes.size()));
  return RemoteSecret(std::vector<std::byte>(bytes.begin(), bytes.end()));
}

std::optional<RemoteSecret::Mac> RemoteSecret::mac(
    std::initializer_list<std::span<const std::byte>> parts) const {
  std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> hmac(EVP_MAC_fetch(nullptr, "HMAC", nullptr),
                                                         &EVP_MAC_free);
  if (!hmac) return std::nullopt;
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmac.get()),
                                                                &EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  if (!ctx || EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key_.data()),
                           key_.size(), params) != 1)
    return std::nullopt;
  for (std::span<const std::byte> part : parts)
    if (EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()),
                       part.size()) != 1)
      return std::nullopt;
  Mac out{};
  std::size_t written = 0;
  if (EVP_MAC_final(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &written,
                    out.size()) != 1 ||
      written != out.size())
    return std::nullopt;
  return out;
}

bool RemoteSecret::verify(std::span<const std::byte> claimed,
                          std::initializer_list<std::span<const std::byte>> parts) const {
  const std::optional<Mac> m = mac(parts);
  return m && claimed.size() == m->size() &&
         CRYPTO_memcmp(m->data(), claimed.data(), m->size()) == 0;
}

}  // namespace kvtier::tiers

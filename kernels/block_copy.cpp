#include "kernels/block_copy.h"

#include <cassert>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvtier::kernels {

void copy_block_reference(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void copy_block(void* dst, const void* src, std::size_t bytes) {
  assert(reinterpret_cast<std::uintptr_t>(dst) % 64 == 0);
  assert(reinterpret_cast<std::uintptr_t>(src) % 64 == 0);
  assert(bytes % 64 == 0);
#if defined(__AVX512F__)
  auto* d = static_cast<__m512i*>(dst);
  const auto* s = static_cast<const __m512i*>(src);
  for (std::size_t i = 0; i < bytes / 64; ++i) _mm512_stream_si512(d + i, _mm512_load_si512(s + i));
  _mm_sfence();  // streamed stores are weakly ordered: publish them before returning
#elif defined(__AVX__)
  auto* d = static_cast<__m256i*>(dst);
  const auto* s = static_cast<const __m256i*>(src);
  for (std::size_t i = 0; i < bytes / 32; ++i) _mm256_stream_si256(d + i, _mm256_load_si256(s + i));
  _mm_sfence();
#elif defined(__SSE2__)
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (std::size_t i = 0; i < bytes / 16; ++i) _mm_stream_si128(d + i, _mm_load_si128(s + i));
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace kvtier::kernels

// Widening the half-precision dtypes a safetensors file may hold to the fp32
// the engine computes in.
#include <bit>
#include <cstring>

#include "engine/model/safetensors.h"

namespace kvtier {

float f16_to_f32(std::uint16_t bits) {
  // Move exponent and mantissa into fp32's places and rebias the exponent
  // from 15 to 127; then fix the two ends of the exponent range. Written as
  // selects, not branches, so the loop over a tensor vectorises.
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t shifted = static_cast<std::uint32_t>(bits & 0x7FFFu) << 13;
  const std::uint32_t exponent = shifted & 0x0F800000u;
  const std::uint32_t normal = shifted + ((127u - 15u) << 23);
  // Infinity and NaN (exponent all ones): all ones in fp32 too, the NaN
  // payload (and so its quiet bit) moved up with the mantissa.
  const std::uint32_t special = normal + ((128u - 16u) << 23);
  // Zero and subnormals: mantissa * 2^-24, computed exactly in fp32 as
  // (1.mantissa * 2^-14) - 2^-14.
  const float subnormal = std::bit_cast<float>(normal + (1u << 23)) - 0x1p-14f;
  const std::uint32_t magnitude = exponent == 0x0F800000u ? special
                                  : exponent == 0         ? std::bit_cast<std::uint32_t>(subnormal)
                                                          : normal;
  return std::bit_cast<float>(sign | magnitude);
}

float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

bool safetensors_dtype_widens_to_f32(std::string_view dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

namespace {

// One loop per format, so the conversion inlines and vectorises.
template <float (*widen)(std::uint16_t)>
void widen_all(const std::byte* data, std::uint64_t n, float* out) {
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, data + 2 * i, sizeof bits);  // little-endian, like every host we run on
    out[i] = widen(bits);
  }
}

}  // namespace

void safetensors_to_f32(const SafetensorsTensor& t, float* out) {
  const std::uint64_t n = t.elements();
  if (t.dtype == "F32") {
    std::memcpy(out, t.data, n * sizeof(float));
  } else if (t.dtype == "F16") {
    widen_all<f16_to_f32>(t.data, n, out);
  } else {
    widen_all<bf16_to_f32>(t.data, n, out);
  }
}

}  // namespace kvtier

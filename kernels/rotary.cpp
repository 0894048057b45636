#include "kernels/rotary.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace kvtier::kernels {

float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(rounded & 0xFFFF0000u);
}

RotaryTable::RotaryTable(int head_dim, float base, int positions, bool bf16)
    : half_(head_dim / 2), positions_(positions) {
  cos_.resize(static_cast<std::size_t>(positions) * half_);
  sin_.resize(cos_.size());
  inv_freq_.resize(half_);
  for (int j = 0; j < half_; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv_freq_[j] = static_cast<float>(1.0 / std::pow(static_cast<double>(base), exponent));
  }
  for (int p = 0; p < positions; ++p)
    for (int j = 0; j < half_; ++j) {
      const float angle = static_cast<float>(p) * inv_freq_[j];
      float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      if (bf16) c = round_to_bf16(c), s = round_to_bf16(s);
      cos_[static_cast<std::size_t>(p) * half_ + j] = c;
      sin_[static_cast<std::size_t>(p) * half_ + j] = s;
    }
}

void RotaryTable::apply(float* x, int heads, int pos) const {
  const float* c = cos(pos);
  const float* s = sin(pos);
  for (int h = 0; h < heads; ++h) {
    float* x1 = x + static_cast<long>(h) * 2 * half_;
    float* x2 = x1 + half_;
    for (int j = 0; j < half_; ++j) rotary_element(x1[j], x2[j], c[j], s[j]);
  }
}

void RotaryTable::shift_keys(float* k, int heads, int page_size, int count, int delta) const {
  if (delta == 0) return;
  std::vector<float> c(half_), s(half_);
  for (int j = 0; j < half_; ++j) {
    const double angle = static_cast<double>(delta) * inv_freq_[j];
    c[j] = static_cast<float>(std::cos(angle));
    s[j] = static_cast<float>(std::sin(angle));
  }
  // Element (h, d, p) of the page sits at (h * D + d) * page_size + p.
  for (int h = 0; h < heads; ++h)
    for (int j = 0; j < half_; ++j) {
      float* x1 = k + (static_cast<long>(h) * 2 * half_ + j) * page_size;
      float* x2 = x1 + static_cast<long>(half_) * page_size;
      for (int p = 0; p < count; ++p) rotary_element(x1[p], x2[p], c[j], s[j]);
    }
}

}  // namespace kvtier::kernels

// The project's one pseudo-random generator: xoshiro256** seeded through
// splitmix64, written out so that a seed gives the same stream with every
// compiler and standard library (<random>'s distributions do not). The
// sampler draws each request's tokens from it (engine/model/sampler.cpp) and random
// weights are made with it (engine/model/model_weights.cpp); each caller turns the
// 64-bit words into numbers its own way. Integer arithmetic only.
#pragma once

#include <bit>
#include <cstdint>

namespace kvtier::util {

// splitmix64 (Vigna): advances `state` by the golden-ratio step and returns
// a well-mixed word of it. Turns any seed, 0 included, into words fit for
// xoshiro's state, which must not be all zero.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256** 1.0 (Blackman and Vigna), its four state words the first four
// splitmix64 outputs from the seed, as its authors advise.
class Xoshiro256StarStar {
 public:
  constexpr explicit Xoshiro256StarStar(std::uint64_t seed) {
    for (std::uint64_t& word : s_) word = splitmix64(seed);
  }

  constexpr std::uint64_t next() {
    const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }

 private:
  std::uint64_t s_[4];
};

}  // namespace kvtier::util

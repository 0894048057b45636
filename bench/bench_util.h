// Small helpers the benchmark programs share.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <vector>

namespace kvtier::bench {

// n token ids drawn uniformly from [0, vocab) by a seeded mt19937: the same
// prompt on every run, so runs compare.
inline std::vector<int> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int& x : t) x = pick(rng);
  return t;
}

// Wall-clock seconds since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The best (least) wall-clock seconds of `runs` calls of fn(): the figure
// least disturbed by the rest of a noisy machine. fn() must finish its work
// before it returns (a GPU forward synchronises).
template <typename Fn>
double best_seconds(int runs, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// The bundled character model, found from this source tree (the benchmarks
// run from the build tree, wherever it is).
inline std::filesystem::path bundled_model_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "models/fortunes-char";
}

}  // namespace kvtier::bench

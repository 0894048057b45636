#include "bench/random_nanochat.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/model/safetensors.h"
#include "util/random.h"

namespace kvtier::bench {
namespace {

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  float mean;
  float stddev;  // uniform over mean +- stddev * sqrt(3)

  std::uint64_t elements() const {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;
    return n;
  }
};

std::vector<Tensor> tensors_of(const NanochatShape& s) {
  const std::uint64_t L = s.n_layer, C = s.n_embd, D = C / s.n_head, KV = s.n_kv_head * D;
  const std::uint64_t Vp = (s.vocab_size + 63) / 64 * 64;
  const float in_c = 1.0f / std::sqrt(float(C)), in_4c = 1.0f / std::sqrt(4.0f * C);
  const bool ve = s.generation >= 3;
  const int ve_channels = s.generation >= 4 ? 12 : 32;
  std::vector<Tensor> t = {{"transformer.wte.weight", {Vp, C}, 0, 1}};
  if (s.generation >= 2) {
    t.push_back({"resid_lambdas", {L}, 1.0f, 0});
    t.push_back({"x0_lambdas", {L}, 0.1f, 0});
  }
  if (s.generation >= 5) {
    t.push_back({"smear_lambda", {1}, 0.5f, 0});
    t.push_back({"backout_lambda", {1}, 0.2f, 0});
    t.push_back({"smear_gate.weight", {1, 24}, 0, 0.1f});
  }
  for (std::uint64_t i = 0; i < L; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    t.push_back({h + "attn.c_q.weight", {C, C}, 0, in_c});
    t.push_back({h + "attn.c_k.weight", {KV, C}, 0, in_c});
    t.push_back({h + "attn.c_v.weight", {KV, C}, 0, in_c});
    t.push_back({h + "attn.c_proj.weight", {C, C}, 0, in_c});
    t.push_back({h + "mlp.c_fc.weight", {4 * C, C}, 0, in_c});
    t.push_back({h + "mlp.c_proj.weight", {C, 4 * C}, 0, in_4c});
    if (ve && i % 2 == (L - 1) % 2) {
      t.push_back({h + "attn.ve_gate.weight",
                   {std::uint64_t(s.n_kv_head), std::uint64_t(ve_channels)},
                   0,
                   0.1f});
      t.push_back({"value_embeds." + std::to_string(i) + ".weight", {Vp, KV}, 0, 1});
    }
  }
  t.push_back({"lm_head.weight", {Vp, C}, 0, in_c});
  return t;
}

}  // namespace

std::expected<void, std::string> write_random_nanochat(const std::filesystem::path& dir,
                                                       const NanochatShape& s, std::uint64_t seed) {
  const nlohmann::json config = {{"format", "nanochat"},
                                 {"generation", s.generation},
                                 {"n_layer", s.n_layer},
                                 {"n_head", s.n_head},
                                 {"n_kv_head", s.n_kv_head},
                                 {"n_embd", s.n_embd},
                                 {"vocab_size", s.vocab_size},
                                 {"sequence_len", s.sequence_len},
                                 {"window_pattern", s.window_pattern},
                                 {"softcap", 15},
                                 {"rope_table", "fp32"}};
  std::ofstream(dir / "config.json") << config.dump(2) << "\n";

  const std::vector<Tensor> tensors = tensors_of(s);
  std::vector<SafetensorsEntry> entries;
  for (const Tensor& t : tensors) entries.push_back({t.name, t.shape});
  util::Xoshiro256StarStar rng(seed);
  std::vector<float> chunk(std::size_t{1} << 18);
  return write_f32_safetensors(
      dir / "model.safetensors", entries, [&](std::size_t index, std::ostream& out) {
        const Tensor& t = tensors[index];
        const float half_width = t.stddev * std::sqrt(3.0f);
        for (std::uint64_t left = t.elements(); left > 0;) {
          const auto m = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
          for (std::size_t i = 0; i < m; ++i) {
            // 24 random bits -> [-1, 1).
            const float u = static_cast<float>(rng.next() >> 40) * (2.0f / 16777216.0f) - 1.0f;
            chunk[i] = t.mean + half_width * u;
          }
          out.write(reinterpret_cast<const char*>(chunk.data()),
                    static_cast<std::streamsize>(m * sizeof(float)));
          left -= m;
        }
      });
}

}  // namespace kvtier::bench

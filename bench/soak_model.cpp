#include "bench/soak_model.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "engine/model/model_weights.h"

namespace kvtier::bench {

namespace fs = std::filesystem;

std::expected<void, std::string> write_random_model(const fs::path& dir, const ModelConfig& config,
                                                    std::uint64_t seed, const fs::path& bpe_dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return std::unexpected(dir.string() + ": " + ec.message());
  for (const char* name : {"encoder.json", "vocab.bpe"}) {
    fs::copy_file(bpe_dir / name, dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return std::unexpected((bpe_dir / name).string() + ": " + ec.message());
  }
  const nlohmann::ordered_json c = {
      {"format", "nanogpt"},
      {"n_layer", config.n_layer},
      {"n_head", config.n_head},
      {"n_embd", config.n_embd},
      {"vocab_size", config.vocab_size},
      {"block_size", config.block_size},
      {"bias", config.bias},
      {"gelu", config.gelu == Gelu::kTanh ? "tanh" : "erf"},
      {"weight_layout",
       config.weight_layout == kernels::WeightLayout::kInOut ? "in_out" : "out_in"},
      {"layer_norm_eps", config.layer_norm_eps},
      {"random_weights_seed", seed}};  // ignored by the daemon; says what this folder is
  std::ofstream out(dir / "config.json");
  out << c.dump(2) << "\n";
  out.close();
  if (!out) return std::unexpected((dir / "config.json").string() + ": write failed");
  return ModelWeights::random(config, seed).save(config, dir / "model.safetensors");
}

}  // namespace kvtier::bench

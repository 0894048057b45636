#include "engine/model/model_folder.h"

#include <nlohmann/json.hpp>

#include "engine/model/nanochat/nanochat_config.h"
#include "engine/model/tokenizer.h"

namespace kvtier {

bool is_nanochat(const std::filesystem::path& config_json) {
  auto text = tokenizer_detail::file_read(config_json);
  if (!text) return false;
  const nlohmann::json root = nlohmann::json::parse(*text, nullptr, false);
  if (!root.is_object()) return false;
  const auto format = root.find("format");
  return format != root.end() && *format == "nanochat";
}

std::expected<ModelConfig, std::string> read_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path config_json = dir / "config.json";
  if (!is_nanochat(config_json)) return ModelConfig::load(config_json);
  auto config = NanochatConfig::load(config_json);
  if (!config) return std::unexpected(std::move(config.error()));
  return config->shape();
}

}  // namespace kvtier

// What a model folder's config.json says, whichever family, without reading
// its weights: the family, and the shape and tokenizer (ModelConfig). The
// front half of a model that kvtier-router and kvtierd's start-up checks
// need; Model::load (model.h) picks the family the same way.
#pragma once

#include <expected>
#include <filesystem>
#include <string>

#include "engine/model/model_config.h"

namespace kvtier {

// Whether a folder's config.json names the nanochat family. A file that
// cannot be read or parsed is left to the GPT-2 reader, whose errors say why.
bool is_nanochat(const std::filesystem::path& config_json);

// The shape and tokenizer (Model::config) of the model in `dir`. Errors name
// the file and the problem, as Model::load's.
std::expected<ModelConfig, std::string> read_model_config(const std::filesystem::path& dir);

}  // namespace kvtier
